"""flashcpu.attention, merge_states, Context and info against a float64
numpy reference (reference.py): options, masks, layouts, strides, dtypes,
out= aliasing, errors and threads."""

import threading
import time

import numpy as np
import pytest

import flashcpu
import reference


def inputs(rng, batch=2, rows=5, keys=37, heads=4, kv_heads=2, dim=16, dv=None):
    q = rng.standard_normal((batch, rows, heads, dim)).astype(np.float32)
    k = rng.standard_normal((batch, keys, kv_heads, dim)).astype(np.float32)
    v = rng.standard_normal((batch, keys, kv_heads, dv or dim)).astype(np.float32)
    return q, k, v


def check(out, lse, expected_out, expected_lse, atol=2e-5):
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), expected_out,
                               atol=atol, rtol=1e-4)
    finite = np.isfinite(expected_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], expected_lse[finite], atol=atol * 10, rtol=1e-5)


OPTIONS = [
    {},
    {"causal": True},
    {"causal": True, "window": (3, 0)},
    {"window": (2, 2)},
    {"softcap": 5.0, "causal": True},
    {"scale": 0.3},
    {"kv_lengths": [37, 11], "causal": True},
    {"kv_lengths": [0, 20]},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("rows", [1, 5, 40])
def test_matches_reference(options, rows):
    rng = np.random.default_rng(rows)
    q, k, v = inputs(rng, rows=rows, keys=max(37, rows))
    if "kv_lengths" in options:
        options = dict(options, kv_lengths=[min(x, k.shape[1]) for x in options["kv_lengths"]])
    out, lse = flashcpu.attention(q, k, v, return_lse=True, **options)
    expected = reference.attention(q, k, v, **options)
    check(out, lse, *expected)
    assert out.dtype == np.float32 and out.shape == q.shape


def test_additive_mask_broadcasts_and_hides():
    rng = np.random.default_rng(3)
    q, k, v = inputs(rng)
    mask = rng.standard_normal((1, 4, 1, 37)).astype(np.float32)  # per head, per key
    mask[..., 5] = -np.inf
    out, lse = flashcpu.attention(q, k, v, additive_mask=mask, return_lse=True)
    check(out, lse, *reference.attention(q, k, v, additive=mask))


def test_min_float_mask_on_every_key_is_the_uniform_softmax():
    rng = np.random.default_rng(4)
    q, k, v = inputs(rng, batch=1, rows=1, keys=9)
    mask = np.full((1, 1, 1, 9), np.finfo(np.float32).min, dtype=np.float32)
    out = flashcpu.attention(q, k, v, additive_mask=mask)
    group_mean = v[0].mean(axis=0)  # [Hkv, Dv]
    np.testing.assert_allclose(out[0, 0], np.repeat(group_mean, 2, axis=0), atol=1e-5)


def test_tree_mask():
    rng = np.random.default_rng(5)
    q, k, v = inputs(rng, rows=4, keys=70)
    tree = rng.random((2, 4, 66)) < 0.6
    out, lse = flashcpu.attention(q, k, v, tree_mask=tree, causal=True, return_lse=True)
    check(out, lse, *reference.attention(q, k, v, tree=tree, causal=True))


def test_bhsd_layout_and_strided_views():
    rng = np.random.default_rng(6)
    q, k, v = inputs(rng, rows=6, keys=30)
    wide = rng.standard_normal((2, 4, 6, 40)).astype(np.float32)
    wide[..., :16] = q.transpose(0, 2, 1, 3)
    q_view = wide[..., :16]  # [B, H, L, D], row stride 40: not contiguous
    k_bhsd = np.ascontiguousarray(k.transpose(0, 2, 1, 3))
    v_bhsd = np.ascontiguousarray(v.transpose(0, 2, 1, 3))
    out = flashcpu.attention(q_view, k_bhsd, v_bhsd, causal=True, layout="bhsd")
    expected, _ = reference.attention(q, k, v, causal=True)
    assert out.shape == (2, 4, 6, 16)
    np.testing.assert_allclose(out.transpose(0, 2, 1, 3), expected, atol=2e-5, rtol=1e-4)


def test_kv_with_heads_outer_strides():
    rng = np.random.default_rng(7)
    q, k, v = inputs(rng, rows=3, keys=25)
    # [B, S, H, D] with the heads outer in memory
    k_strided = np.swapaxes(np.ascontiguousarray(np.swapaxes(k, 1, 2)), 1, 2)
    out = flashcpu.attention(q, k_strided, v)
    np.testing.assert_allclose(out, reference.attention(q, k, v)[0], atol=2e-5, rtol=1e-4)


def test_f16_and_bf16():
    rng = np.random.default_rng(8)
    q, k, v = inputs(rng, rows=4, keys=50)
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    out16 = flashcpu.attention(q16, k16, v16, causal=True)
    assert out16.dtype == np.float16
    np.testing.assert_allclose(out16.astype(np.float64),
                               reference.attention(q16, k16, v16, causal=True)[0], atol=3e-3)
    qb, kb, vb = (reference.f32_to_bf16(x) for x in (q, k, v))
    outb = flashcpu.attention(flashcpu.bf16(qb), flashcpu.bf16(kb), flashcpu.bf16(vb),
                              causal=True)
    assert outb.dtype == np.uint16 and outb.shape == q.shape
    expected = reference.attention(*(reference.bf16_to_f32(x) for x in (qb, kb, vb)),
                                   causal=True)[0]
    np.testing.assert_allclose(reference.bf16_to_f32(outb), expected, atol=2e-2)


def test_out_is_written_in_place_and_returned():
    rng = np.random.default_rng(9)
    q, k, v = inputs(rng)
    out = np.full(q.shape, 7.0, dtype=np.float32)
    returned = flashcpu.attention(q, k, v, out=out)
    assert returned is out
    np.testing.assert_allclose(out, reference.attention(q, k, v)[0], atol=2e-5, rtol=1e-4)


def test_errors_carry_status_and_message_and_leave_out_untouched():
    rng = np.random.default_rng(10)
    q, k, v = inputs(rng, heads=3, kv_heads=2)  # 3 is not a multiple of 2
    out = np.full(q.shape, 7.0, dtype=np.float32)
    with pytest.raises(flashcpu.Error) as caught:
        flashcpu.attention(q, k, v, out=out)
    assert caught.value.status != "OK" and caught.value.message
    assert (out == 7.0).all()
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.attention(q[0], k, v)
    with pytest.raises(flashcpu.UnsupportedDtypeError):
        flashcpu.attention(q.astype(np.float64), k, v)
    with pytest.raises(flashcpu.UnsupportedDtypeError):  # not read as native floats
        flashcpu.attention(q.astype(">f4"), k, v)
    with pytest.raises(flashcpu.BadLayoutError):
        flashcpu.attention(np.asfortranarray(q), k, v)
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.attention(q, k, v, layout="sbhd")
    q2, k2, v2 = inputs(rng)
    out2 = np.full(q2.shape, 7.0, dtype=np.float32)
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.attention(q2, k2, v2, sinks=np.zeros(3, dtype=np.float32), out=out2)
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.attention(q2, k2, v2, alibi_slopes=np.zeros((3, 4), dtype=np.float32))
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.attention(q2, k2, v2, alibi_slopes=[0.5, np.nan, 0.5, 0.5], out=out2)
    assert "alibi_slopes[1]" in caught.value.message and "not finite" in caught.value.message
    assert (out2 == 7.0).all()


@pytest.mark.parametrize("options,match", [
    ({"kv_lengths": [2 ** 64, 3]}, "kv_lengths"),
    ({"kv_lengths": [3.7, 2.2]}, "kv_lengths"),
    ({"kv_lengths": "34"}, "kv_lengths"),
    ({"kv_lengths": np.array([True, True])}, "kv_lengths"),
    ({"window": (2 ** 64, 0)}, "window left"),
    ({"window": (0, 1.5)}, "window right"),
    ({"window": (float("inf"), 0)}, "window left"),
    ({"scale": 1e-50}, "rounds to 0"),  # 0 would mean 1/sqrt(D)
    ({"softcap": 1e-50}, "rounds to 0"),  # 0 would mean no softcap
    ({"scale": "x"}, "scale"),
    ({"softcap": 10 ** 400}, "softcap"),
    ({"context": object()}, "context"),
], ids=lambda x: x if isinstance(x, str) else ",".join(x))
def test_arguments_that_would_be_truncated_or_wrapped_are_refused(options, match):
    rng = np.random.default_rng(17)
    q, k, v = inputs(rng)
    out = np.full(q.shape, 7.0, dtype=np.float32)
    with pytest.raises(flashcpu.InvalidArgumentError, match=match):
        flashcpu.attention(q, k, v, out=out, **options)
    assert (out == 7.0).all()


def test_integer_arguments_of_other_integer_types_are_taken():
    rng = np.random.default_rng(18)
    q, k, v = inputs(rng)
    expected = flashcpu.attention(q, k, v, kv_lengths=[30, 11], window=(4, 0), causal=True)
    got = flashcpu.attention(q, k, v, kv_lengths=np.array([30, 11], np.uint16),
                             window=(np.int32(4), np.int64(0)), causal=True)
    np.testing.assert_array_equal(got, expected)
    for threads in ("2", 1.5, True):
        with pytest.raises(flashcpu.InvalidArgumentError, match="threads"):
            flashcpu.Context(threads=threads)


def test_tree_mask_rows_must_be_the_query_rows():
    rng = np.random.default_rng(19)
    q, k, v = inputs(rng, rows=3)
    for rows in (2, 4):
        with pytest.raises(flashcpu.ShapeMismatchError, match="tree_mask"):
            flashcpu.attention(q, k, v, tree_mask=np.ones((1, rows, 3), dtype=bool))


def sink_values(rng, heads, dtype):
    """(what flashcpu.attention takes, the values it means) for sinks."""
    values = (rng.standard_normal(heads) * 2).astype(np.float32)
    if dtype == "f16":
        given = values.astype(np.float16)
        return given, given.astype(np.float64)
    if dtype == "bf16":
        bits = reference.f32_to_bf16(values)
        return flashcpu.bf16(bits), reference.bf16_to_f32(bits).astype(np.float64)
    return values, values.astype(np.float64)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("options", [{"causal": True}, {}, {"window": (4, 1), "softcap": 3.0},
                                     {"kv_lengths": [37, 0], "causal": True}],
                         ids=["causal", "plain", "window,softcap", "empty_row"])
@pytest.mark.parametrize("rows", [1, 5, 40])
def test_sinks(dtype, options, rows):
    rng = np.random.default_rng(20 + rows)
    q, k, v = inputs(rng, rows=rows, keys=max(37, rows))
    given, values = sink_values(rng, 4, dtype)
    out, lse = flashcpu.attention(q, k, v, sinks=given, return_lse=True, **options)
    check(out, lse, *reference.attention(q, k, v, sinks=values, **options))
    if "kv_lengths" in options:  # a row that sees no key: 0 and lse = the sink
        assert (out[1] == 0).all()
        np.testing.assert_allclose(lse[1], np.repeat(values[:, None], rows, axis=1), rtol=1e-6)


def test_sinks_in_another_byte_order_are_read_as_values():
    rng = np.random.default_rng(23)
    q, k, v = inputs(rng, rows=3, keys=9)
    values = (rng.standard_normal(4) * 2).astype(np.float32)
    out, lse = flashcpu.attention(q, k, v, sinks=values.astype(">f4"), return_lse=True)
    check(out, lse, *reference.attention(q, k, v, sinks=values.astype(np.float64)))


def test_sinks_in_one_part_of_a_merge():
    rng = np.random.default_rng(21)
    q, k, v = inputs(rng, rows=3, keys=40)
    sinks = rng.standard_normal(4).astype(np.float32)
    first, first_lse = flashcpu.attention(q, k[:, :15], v[:, :15], sinks=sinks,
                                          return_lse=True)
    second, second_lse = flashcpu.attention(q, k[:, 15:], v[:, 15:], return_lse=True)
    merged, lse = flashcpu.merge_states([first, second], [first_lse, second_lse],
                                        return_lse=True)
    check(merged, lse, *reference.attention(q, k, v, sinks=sinks))


@pytest.mark.parametrize("shape", ["heads", "batch_heads", "strided_rows", "broadcast_rows",
                                   "list", "float64"])
@pytest.mark.parametrize("options", [{"causal": True}, {"softcap": 4.0, "window": (6, 2)},
                                     {"kv_lengths": [30, 9], "causal": True}],
                         ids=["causal", "softcap,window", "kv_lengths"])
def test_alibi(shape, options):
    rng = np.random.default_rng(22)
    q, k, v = inputs(rng, rows=6, keys=37)
    slopes = (2.0 ** -np.arange(1, 9, 2)).astype(np.float32)  # [Hq]
    per_batch = np.stack([slopes, slopes[::-1] * 0.5])
    given, expected = {
        "heads": (slopes, slopes),
        "batch_heads": (per_batch, per_batch),
        "strided_rows": (np.concatenate([per_batch, per_batch], axis=1)[:, :4], per_batch),
        "broadcast_rows": (np.broadcast_to(slopes, (2, 4)), slopes),
        "list": (slopes.tolist(), slopes),
        "float64": (per_batch.astype(np.float64), per_batch),
    }[shape]
    mask = rng.standard_normal((1, 1, 6, 37)).astype(np.float32)
    out, lse = flashcpu.attention(q, k, v, alibi_slopes=given, additive_mask=mask,
                                  return_lse=True, **options)
    check(out, lse, *reference.attention(q, k, v, alibi=expected, additive=mask, **options),
          atol=5e-5)


def test_sinks_and_alibi_together_in_bhsd():
    rng = np.random.default_rng(23)
    q, k, v = inputs(rng, rows=9, keys=20)
    sinks = rng.standard_normal(4).astype(np.float32)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32)
    out = flashcpu.attention(*(np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)),
                             causal=True, sinks=sinks, alibi_slopes=slopes, layout="bhsd")
    expected, _ = reference.attention(q, k, v, causal=True, sinks=sinks, alibi=slopes)
    np.testing.assert_allclose(out.transpose(0, 2, 1, 3), expected, atol=2e-5, rtol=1e-4)


def test_merge_states_of_two_key_ranges_is_attention_over_all():
    rng = np.random.default_rng(11)
    q, k, v = inputs(rng, rows=3, keys=40)
    first, first_lse = flashcpu.attention(q, k[:, :15], v[:, :15], return_lse=True)
    second, second_lse = flashcpu.attention(q, k[:, 15:], v[:, 15:], return_lse=True)
    merged, lse = flashcpu.merge_states([first, second], [first_lse, second_lse],
                                        return_lse=True)
    check(merged, lse, *reference.attention(q, k, v))


def test_threads_with_own_and_default_contexts():
    rng = np.random.default_rng(12)
    q, k, v = inputs(rng, rows=8, keys=300)
    expected = reference.attention(q, k, v, causal=True)[0]
    failures = []

    def work(own):
        try:
            context = flashcpu.Context(threads=2) if own else None
            for _ in range(5):
                out = flashcpu.attention(q, k, v, causal=True, context=context)
                np.testing.assert_allclose(out, expected, atol=2e-5, rtol=1e-4)
        except Exception as error:  # noqa: BLE001 (reported below)
            failures.append(error)

    threads = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def test_context_and_info():
    with flashcpu.Context(threads=1, isa="scalar") as context:
        assert context.threads == 1 and context.isa == "scalar"
        assert "teams: 1 threads" in context.describe()
        rng = np.random.default_rng(13)
        q, k, v = inputs(rng)
        out = flashcpu.attention(q, k, v, context=context)
        np.testing.assert_allclose(out, reference.attention(q, k, v)[0], atol=2e-5, rtol=1e-4)
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.Context(isa="sse9")
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.Context(settings="kernel = no_such_kernel")
    assert "no_such_kernel" in caught.value.message
    info = flashcpu.info()
    assert info["version"] == flashcpu.__version__
    assert any(kernel["runnable"] for kernel in info["kernels"])


def _settings_line(context):
    return context.describe().split("\nsettings: ")[1].split("\n")[0]


def test_context_settings_string():
    with flashcpu.Context(threads=1, settings="splitkv_max_rows = 3; launch = region") as context:
        settings = _settings_line(context).split()
        assert "splitkv_max_rows=3" in settings and "launch=region" in settings
    with flashcpu.Context(threads=1, settings="") as empty, flashcpu.Context(threads=1) as plain:
        assert _settings_line(empty) == _settings_line(plain)
    for bad, words in (("launch = pool; launch = region", ["launch", "twice"]),
                       ("bogus = 1", ["unknown key", "bogus"]),
                       ("splitkv_max_rows = 65", ["splitkv_max_rows", "65"])):
        with pytest.raises(flashcpu.InvalidArgumentError) as caught:
            flashcpu.Context(settings=bad)
        assert all(word in caught.value.message for word in words), caught.value.message
    for bad in (b"kernel = auto", "kernel = auto\0; launch = region"):
        with pytest.raises(flashcpu.InvalidArgumentError):
            flashcpu.Context(settings=bad)


def test_context_wake_before_calls_after_idle_time():
    rng = np.random.default_rng(14)
    q, k, v = inputs(rng, rows=1, keys=600)
    expected = flashcpu.attention(q, k, v, causal=True)
    with flashcpu.Context(threads=2, host_openmp=None) as context:
        for pause in (0.0, 0.03, 0.03):
            time.sleep(pause)  # the workers fall asleep within milliseconds
            context.wake()
            out = flashcpu.attention(q, k, v, causal=True, context=context)
            np.testing.assert_array_equal(out, expected)
    with pytest.raises(flashcpu.InvalidArgumentError):
        context.wake()  # closed


def test_context_names_the_kernels_a_call_ran():
    ctx = flashcpu.Context(threads=1)
    assert ctx.last_kernels == ""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 20, 4, 32)).astype(np.float32)
    k = rng.standard_normal((1, 20, 2, 32)).astype(np.float32)
    flashcpu.attention(q, k, k, causal=True, context=ctx)
    known = {kernel["name"]: kernel for kernel in flashcpu.info()["kernels"]}
    ran = ctx.last_kernels
    assert ran in known and known[ran]["runnable"], ran
    assert known[ran]["weights_dtype"] in ("f32", "bf16")
    ctx.close()


def test_options_of_one_call_do_not_reach_the_next():
    """Calls that pass no arrays in their options share prepared params: each
    call must still get exactly its own options."""
    rng = np.random.default_rng(31)
    q, k, v = inputs(rng, rows=6, keys=11)
    calls = [{"causal": True}, {}, {"softcap": 2.0}, {"window": (3, 0), "causal": True},
             {"scale": 0.5}, {"window": [3, 0], "causal": True}, {"causal": True},
             {"kv_lengths": [7, 11]}, {}]
    for options in calls:
        out, lse = flashcpu.attention(q, k, v, return_lse=True, **options)
        check(out, lse, *reference.attention(q, k, v, **options))
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.attention(q, k, v, window=(1, 2, 3))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_call_with_out_gives_the_bytes_of_the_general_path(layout, dtype):
    """attention(..., out=...) without array options takes a short path
    (the views packed in one step): the bytes of the general path, and the
    library's errors with nothing written."""
    rng = np.random.default_rng(8)
    shape_q = (2, 3, 8, 32) if layout == "bshd" else (2, 8, 3, 32)
    shape_kv = (2, 40, 2, 32) if layout == "bshd" else (2, 2, 40, 32)
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_kv).astype(dtype)
    v = rng.standard_normal(shape_kv).astype(dtype)
    general = flashcpu.attention(q, k, v, causal=True, softcap=30.0, layout=layout)
    out = np.full_like(general, np.nan)
    assert flashcpu.attention(q, k, v, causal=True, softcap=30.0, layout=layout,
                              out=out) is out
    assert np.array_equal(out, general)
    # 3 kv heads: not a divisor of 8 query heads
    bad_k = (np.concatenate([k, k[:, :, :1]], axis=2) if layout == "bshd"
             else np.concatenate([k, k[:, :1]], axis=1))
    out[...] = 7
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.attention(q, bad_k, v, layout=layout, out=out)
    assert np.all(out == 7)
