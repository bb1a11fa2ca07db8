"""flashcpu.PagedKV, Plan, attention_paged and kv_append against a float64
numpy reference that gathers each request's pages (reference.py): page
sizes, NHD and HND, pages in random order, ragged batches of 0-row, 1-row,
few-row and many-row requests and of requests without keys, dtypes,
strides, out= aliasing, errors, and kv_append round trips."""

import os
import sys
import threading

import numpy as np
import pytest

import flashcpu
import reference

# (query rows, keys) per request: decode rows, a request without rows, a
# few verify rows, an empty request, a prefill chunk against a cached
# prefix, a first token, a fresh prompt, rows without keys, a longer chunk.
REQUESTS = [(1, 40), (0, 17), (3, 25), (0, 0), (37, 60), (1, 1), (5, 5), (2, 0), (12, 30)]
HEADS, KV_HEADS, DIM = 4, 2, 16


def cast(values, dtype):
    """(what flashcpu takes, the float64 values it holds) of a float32 array."""
    if dtype == "f16":
        given = values.astype(np.float16)
        return given, given.astype(np.float64)
    if dtype == "bf16":
        bits = reference.f32_to_bf16(values)
        return flashcpu.bf16(bits), reference.bf16_to_f32(bits).astype(np.float64)
    return values, values.astype(np.float64)


class Step:
    """A ragged batch over a page pool: requests' pages in random order,
    the unused block-table entries -1 (never read)."""

    def __init__(self, rng, requests=REQUESTS, page_size=3, layout="nhd", dtype="f32",
                 q_dtype=None, dv=None, spare_pages=5, heads=HEADS):
        self.rows = [r for r, _ in requests]
        self.keys = [s for _, s in requests]
        self.page_size, self.layout, self.heads = page_size, layout, heads
        used = [-(-s // page_size) for s in self.keys]
        self.num_pages = sum(used) + spare_pages
        order = rng.permutation(self.num_pages)
        width = max(used + [1]) + 2
        self.block_table = np.full((len(requests), width), -1, dtype=np.int32)
        self.flat_pages, at = [], 0
        for r, count in enumerate(used):
            self.block_table[r, :count] = order[at:at + count]
            self.flat_pages.extend(order[at:at + count])
            at += count
        self.block_offsets = np.concatenate([[0], np.cumsum(used)]).astype(np.int32)
        self.flat_pages = np.asarray(self.flat_pages, dtype=np.int32)
        self.cu = np.concatenate([[0], np.cumsum(self.rows)]).astype(np.int32)
        self.tokens = int(self.cu[-1])
        dv = dv or DIM
        shape = ((self.num_pages, page_size, KV_HEADS) if layout == "nhd"
                 else (self.num_pages, KV_HEADS, page_size))
        self.k, self.k_values = cast(rng.standard_normal(shape + (DIM,)).astype(np.float32),
                                     dtype)
        self.v, self.v_values = cast(rng.standard_normal(shape + (dv,)).astype(np.float32),
                                     dtype)
        self.q, self.q_values = cast(
            rng.standard_normal((self.tokens, heads, DIM)).astype(np.float32),
            q_dtype or dtype)
        self.kv = flashcpu.PagedKV(self.k, self.v, layout=layout)

    def plan(self, **kwargs):
        return flashcpu.Plan(self.cu, self.keys, self.block_table, num_heads=self.heads,
                             kv=self.kv, **kwargs)

    def expected(self, **options):
        return reference.paged_attention(self.q_values, self.k_values, self.v_values,
                                         self.cu, self.keys, self.block_table,
                                         layout=self.layout, **options)


def check(out, lse, expected_out, expected_lse, atol=2e-5):
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), expected_out,
                               atol=atol, rtol=1e-4)
    if lse is not None:
        finite = np.isfinite(expected_lse)
        np.testing.assert_array_equal(np.isfinite(lse), finite)
        np.testing.assert_allclose(lse[finite], expected_lse[finite], atol=atol * 10,
                                   rtol=1e-5)


OPTIONS = [
    {},
    {"causal": True},
    {"causal": True, "window": (7, 0)},
    {"window": (3, 2)},
    {"softcap": 4.0, "causal": True},
    {"scale": 0.2},
    {"sinks": True, "causal": True},
    {"alibi": "requests", "causal": True},
    {"alibi": "heads"},
    {"additive": True, "causal": True},
]


def realize(rng, step, options):
    """(kwargs for flashcpu, kwargs for the reference) of an OPTIONS entry."""
    call, ref = dict(options), dict(options)
    if options.get("sinks"):
        sinks = rng.standard_normal(step.heads).astype(np.float32)
        call["sinks"], ref["sinks"] = sinks, sinks
    if "alibi" in options:
        rows = len(step.keys) if options["alibi"] == "requests" else None
        slopes = rng.uniform(0.01, 0.5, (rows, step.heads) if rows else step.heads)
        slopes = slopes.astype(np.float32)
        call["alibi_slopes"], ref["alibi"] = slopes, slopes
        del call["alibi"]
    if options.get("additive"):
        mask = rng.standard_normal((step.heads, step.tokens, max(step.keys))).astype(np.float32)
        mask[:, ::3, 2] = -np.inf
        call["additive_mask"], ref["additive"] = mask, mask
        del call["additive"]
    return call, ref


@pytest.mark.parametrize("options", OPTIONS,
                         ids=lambda o: ",".join(f"{k}" for k in o) or "plain")
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_matches_reference(options, layout, page_size):
    rng = np.random.default_rng(page_size)
    step = Step(rng, page_size=page_size, layout=layout)
    call, ref = realize(rng, step, options)
    with step.plan() as plan:
        assert plan.num_tokens == step.tokens
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, return_lse=True, **call)
    assert out.shape == (step.tokens, HEADS, DIM) and out.dtype == np.float32
    assert lse.shape == (HEADS, step.tokens) and lse.dtype == np.float32
    check(out, lse, *step.expected(**ref), atol=5e-5 if "alibi" in options else 2e-5)


KERNELS = [k for k in flashcpu.info()["kernels"] if k["runnable"]]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k["name"])
def test_every_kernel_writes_what_it_writes_on_contiguous_kv(kernel, monkeypatch):
    """Forced to one kernel, the paged path writes the bytes flashcpu.attention
    writes on each request's contiguous K/V (the header's promise)."""
    rng = np.random.default_rng(39)
    name = kernel["name"]
    # bf16 q and an F8_E4M3 or F8_E5M2 K (the F8 kernel: K read before its scale)
    fp8_k = "fp8dot" in name or "_f8__" in name
    bf16 = "bf16dot" in name or "amxbf16" in name or fp8_k  # bf16 q (and K)
    int8_v = "amxint8" in name  # int8 K and V, head_dim 64 or 128
    fp8_v = "amx_f8" in name  # F8 K and V on AMX tiles
    int8_k = "i16dot" in name or "i8dot" in name or int8_v  # int8 or uint8 K
    quantized_k = int8_k or fp8_k
    k_format = "f8_e4m3" if fp8_k else "i8"
    if "splitkv_amx" in name:  # the AMX decode kernels: head_dim 64 takes both
        monkeypatch.setattr(sys.modules[__name__], "DIM", 64)
    step = Step(rng, page_size=3, layout="hnd", dtype="bf16" if bf16 else "f32")
    if quantized_k:  # K (and V) pages as codes with a scale per token and head
        step.k = flashcpu.quantize(step.k, k_format, layout="bhsd")
        step.k_values = flashcpu.dequantize(step.k, layout="bhsd").astype(np.float64)
        if int8_v or fp8_v:
            step.v = flashcpu.quantize(step.v, "i8" if int8_v else k_format, layout="bhsd")
            step.v_values = flashcpu.dequantize(step.v, layout="bhsd").astype(np.float64)
        step.kv = flashcpu.PagedKV(step.k, step.v, layout="hnd")
    sinks = rng.standard_normal(HEADS).astype(np.float32)
    slopes = rng.uniform(0.01, 0.3, (len(REQUESTS), HEADS)).astype(np.float32)
    options = {"causal": True, "softcap": 8.0, "sinks": sinks}
    try:
        context = flashcpu.Context(settings=f"kernel = {kernel['name']}")
    except flashcpu.InvalidArgumentError:
        if os.environ.get("FLASHCPU_ISA"):
            pytest.skip(f"FLASHCPU_ISA={os.environ['FLASHCPU_ISA']} rules it out")
        raise
    with context:
        plan = step.plan(context=context, q_dtype="bfloat16" if bf16 else "float32")
        with plan:
            out, lse = flashcpu.attention_paged(step.q, step.kv, plan, alibi_slopes=slopes,
                                                return_lse=True, **options)
        if bf16:
            check(reference.bf16_to_f32(out), lse,
                  *step.expected(alibi=slopes, **options), atol=2e-2)
        elif int8_k:  # q rounded to integers (the header's exception): 15-bit,
            # or 8-bit (a step of max|q| / 127: about K's own rounding again)
            check(out, lse, *step.expected(alibi=slopes, **options),
                  atol=3e-2 if "i8dot" in kernel["name"] else 2e-3)
        else:
            check(out, lse, *step.expected(alibi=slopes, **options), atol=5e-5)
        wrap = flashcpu.bf16 if bf16 else (lambda x: x)
        for r in range(len(REQUESTS)):
            rows = slice(step.cu[r], step.cu[r + 1])
            if rows.start == rows.stop:
                continue

            def gather(cache):
                return reference.gather_pages(flashcpu._arrays.raw(cache), "hnd",
                                              step.block_table[r], step.keys[r],
                                              dtype=None)[None]
            v = (flashcpu.Quantized(gather(step.v.codes), "i8" if int8_v else k_format,
                                    scales=gather(step.v.scales))
                 if int8_v or fp8_v else gather(step.v))
            k = (flashcpu.Quantized(gather(step.k.codes), k_format,
                                    scales=gather(step.k.scales))
                 if quantized_k else gather(step.k))
            expected, expected_lse = flashcpu.attention(
                wrap(flashcpu._arrays.raw(step.q)[None, rows]),
                k if quantized_k else wrap(k), v if int8_v or fp8_v else wrap(v),
                alibi_slopes=slopes[r], return_lse=True, context=context, **options)
            np.testing.assert_array_equal(out[rows], expected[0])
            np.testing.assert_array_equal(lse[:, rows], expected_lse[0])
        if kernel["family"] == "split-KV decode":
            with pytest.raises(flashcpu.InvalidArgumentError) as caught:
                Step(rng, requests=[(2, 80), (70, 80)]).plan(context=context)
            assert kernel["name"] in caught.value.message


def test_rows_without_keys_get_zero_and_the_sink():
    rng = np.random.default_rng(30)
    step = Step(rng, requests=[(2, 0), (3, 4), (1, 0)])
    sinks = rng.standard_normal(HEADS).astype(np.float32)
    with step.plan() as plan:
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, return_lse=True)
        assert (out[:2] == 0).all() and (out[5:] == 0).all()
        assert np.isneginf(lse[:, :2]).all() and np.isneginf(lse[:, 5:]).all()
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, sinks=sinks,
                                            return_lse=True)
    assert (out[:2] == 0).all()
    np.testing.assert_allclose(lse[:, :2], np.repeat(sinks[:, None], 2, axis=1))
    check(out, lse, *step.expected(sinks=sinks))


@pytest.mark.parametrize("dtype,q_dtype", [("f16", "f16"), ("bf16", "bf16"), ("f16", "f32"),
                                           ("f32", "bf16"), ("bf16", "f16")])
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_dtypes(dtype, q_dtype, layout):
    rng = np.random.default_rng(31)
    step = Step(rng, page_size=16, layout=layout, dtype=dtype, q_dtype=q_dtype)
    sinks, sink_values = cast(rng.standard_normal(HEADS).astype(np.float32), dtype)
    with step.plan() as plan:
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, causal=True, sinks=sinks,
                                            return_lse=True)
    expected, expected_lse = step.expected(causal=True, sinks=sink_values)
    if q_dtype == "bf16":
        assert out.dtype == np.uint16  # bfloat16 bits, like q's
        out = reference.bf16_to_f32(out)
        atol = 2e-2
    else:
        assert out.dtype == (np.float16 if q_dtype == "f16" else np.float32)
        atol = 3e-3 if q_dtype == "f16" else 2e-5
    check(out, None, expected, expected_lse, atol=atol)
    check(np.zeros(1), lse, np.zeros(1), expected_lse, atol=1e-4)


def test_different_v_head_dim():
    rng = np.random.default_rng(32)
    step = Step(rng, dv=24)
    with step.plan() as plan:
        out = flashcpu.attention_paged(step.q, step.kv, plan, causal=True)
    assert out.shape == (step.tokens, HEADS, 24)
    check(out, None, *step.expected(causal=True))


def test_strided_views_and_out_aliasing():
    rng = np.random.default_rng(33)
    step = Step(rng, page_size=4)
    # q: a slice of a wider buffer; K and V: one buffer [pages, 2, page_size, Hkv, D + 8].
    wide_q = rng.standard_normal((step.tokens, HEADS, DIM + 8)).astype(np.float32)
    wide_q[..., :DIM] = step.q
    pool = rng.standard_normal((step.num_pages, 2, 4, KV_HEADS, DIM + 8)).astype(np.float32)
    pool[:, 0, ..., :DIM] = step.k
    pool[:, 1, ..., :DIM] = step.v
    kv = flashcpu.PagedKV(pool[:, 0, ..., :DIM], pool[:, 1, ..., :DIM])
    assert kv.geometry == (step.num_pages, 4, KV_HEADS, DIM, DIM)
    # out: every other head of a larger buffer, [T, Hq, D] with strides of its own
    buffer = np.full((step.tokens, 2 * HEADS, DIM), 7.0, dtype=np.float32)
    out = buffer[:, ::2]
    with step.plan() as plan:
        returned = flashcpu.attention_paged(wide_q[..., :DIM], kv, plan, causal=True, out=out)
    assert returned is out
    check(out, None, *step.expected(causal=True))
    assert (buffer[:, 1::2] == 7.0).all()
    # heads-major q (a transposed view) and a bf16 out given by the caller
    q_heads_major = np.ascontiguousarray(step.q.transpose(1, 0, 2)).transpose(1, 0, 2)
    bits = np.zeros((step.tokens, HEADS, DIM), dtype=np.uint16)
    with step.plan() as plan:
        returned = flashcpu.attention_paged(q_heads_major, kv, plan, causal=True,
                                            out=flashcpu.bf16(bits))
    assert returned is bits
    check(reference.bf16_to_f32(bits), None, *step.expected(causal=True), atol=2e-2)


def test_block_offsets_flashinfer_indices():
    rng = np.random.default_rng(34)
    step = Step(rng, page_size=3, layout="hnd")
    with flashcpu.Plan(step.cu, step.keys, step.flat_pages, num_heads=HEADS, kv=step.kv,
                       block_offsets=step.block_offsets) as plan:
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, causal=True,
                                            return_lse=True)
    check(out, lse, *step.expected(causal=True))


@pytest.mark.parametrize("packed", [False, True])
def test_tree_masks(packed):
    rng = np.random.default_rng(35)
    # a verify request of 5 rows under a tree over its newest 70 keys, one of
    # 3 rows over 4 keys, and requests without trees
    requests = [(1, 30), (5, 90), (2, 12), (3, 20), (20, 40)]
    step = Step(rng, requests=requests, page_size=16)
    tree_keys = np.array([0, 70, 0, 4, 0], dtype=np.int32)
    tree = rng.random((step.tokens, 70)) < 0.5
    given = tree
    if packed:
        padded = np.zeros((step.tokens, 128), dtype=bool)
        padded[:, :70] = tree
        given = np.packbits(padded, axis=-1, bitorder="little").view("<u8")
    if not packed:
        with pytest.raises(flashcpu.ShapeMismatchError):  # fewer columns than keys
            step.plan(tree_bits=tree[:, :60], tree_num_keys=tree_keys)
        with pytest.raises(flashcpu.ShapeMismatchError):  # fewer rows than T
            step.plan(tree_bits=tree[:-1], tree_num_keys=tree_keys)
    with step.plan(tree_bits=given, tree_num_keys=tree_keys) as plan:
        assert "tree masks" in plan.describe()
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, causal=True,
                                            return_lse=True)
    check(out, lse, *step.expected(causal=True, tree=tree, tree_num_keys=tree_keys))


def test_plan_copies_its_arrays_and_serves_every_layer():
    rng = np.random.default_rng(36)
    step = Step(rng, page_size=3)
    layers = [Step(np.random.default_rng(100 + i), page_size=3) for i in range(3)]
    table = step.block_table.copy()
    cu, keys = step.cu.copy(), np.array(step.keys, dtype=np.int64)  # int64: converted
    plan = flashcpu.Plan(cu, keys, table, num_heads=HEADS, kv=step.kv)
    table[:] = 0
    cu[:] = 0
    for layer in layers:  # the same geometry, another cache and q per layer
        assert layer.kv.geometry == step.kv.geometry
        out = flashcpu.attention_paged(layer.q, layer.kv, plan, causal=True)
        check(out, None, *reference.paged_attention(
            layer.q_values, layer.k_values, layer.v_values, step.cu, step.keys,
            step.block_table, causal=True))
    plan.close()
    plan.close()
    assert repr(plan) == "flashcpu.Plan(closed)"
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.attention_paged(step.q, step.kv, plan)


def test_plan_properties_and_contexts():
    rng = np.random.default_rng(37)
    step = Step(rng)
    with flashcpu.Context(threads=1) as context:
        with step.plan(context=context) as plan:
            assert plan.context is context
            assert plan.num_requests == len(REQUESTS) and plan.num_heads == HEADS
            assert plan.max_keys == 60 and plan.num_tokens == step.tokens
            text = plan.describe()
            assert "split-KV decode" in text and "prefill" in text
            assert f"{len(REQUESTS)} requests" in repr(plan)
            out = flashcpu.attention_paged(step.q, step.kv, plan, causal=True)
        check(out, None, *step.expected(causal=True))
    # lists and torch-free sequences of ints are accepted
    with flashcpu.Plan(step.cu.tolist(), step.keys, step.block_table.tolist(),
                       num_heads=HEADS, kv=step.kv) as plan:
        check(flashcpu.attention_paged(step.q, step.kv, plan), None, *step.expected())


def test_an_empty_step():
    rng = np.random.default_rng(38)
    step = Step(rng, requests=[(0, 5), (0, 0)])
    with step.plan() as plan:
        assert plan.num_tokens == 0
        out, lse = flashcpu.attention_paged(step.q, step.kv, plan, return_lse=True)
    assert out.shape == (0, HEADS, DIM) and lse.shape == (HEADS, 0)


def test_threads_with_plans_of_their_own():
    failures = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            step = Step(rng, page_size=16)
            expected = step.expected(causal=True)
            with flashcpu.Context(threads=1) as context, step.plan(context=context) as plan:
                for _ in range(3):
                    check(flashcpu.attention_paged(step.q, step.kv, plan, causal=True), None,
                          *expected)
        except Exception as error:  # noqa: BLE001 (reported below)
            failures.append(error)

    threads = [threading.Thread(target=work, args=(40 + i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


# ---------------------------------------------------------------- errors

def test_errors_raise_the_status_and_leave_out_untouched():
    rng = np.random.default_rng(50)
    step = Step(rng)
    out = np.full((step.tokens, HEADS, DIM), 7.0, dtype=np.float32)
    table = step.block_table.copy()
    table[4, 2] = step.num_pages  # a page past the pool, in a used entry
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.Plan(step.cu, step.keys, table, num_heads=HEADS, kv=step.kv)
    assert caught.value.status == "INVALID_ARGUMENT"
    assert "block_table[" in caught.value.message and "request 4" in caught.value.message
    bad_cu = step.cu.copy()
    bad_cu[3] = bad_cu[2] - 1
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.Plan(bad_cu, step.keys, step.block_table, num_heads=HEADS, kv=step.kv)
    assert "cu_seqlens_q" in caught.value.message
    with pytest.raises(flashcpu.ShapeMismatchError):  # checked here: R + 1 entries
        flashcpu.Plan(step.cu[:-1], step.keys, step.block_table, num_heads=HEADS, kv=step.kv)
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.Plan(step.cu, step.keys, step.block_table[:3], num_heads=HEADS, kv=step.kv)
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:  # no room in the row
        flashcpu.Plan(step.cu, step.keys, step.block_table[:, :2], num_heads=HEADS,
                      kv=step.kv)
    assert "room" in caught.value.message
    with pytest.raises(flashcpu.ShapeMismatchError) as caught:
        flashcpu.Plan(step.cu, step.keys, step.block_table, num_heads=3, kv=step.kv)
    assert "q_heads" in caught.value.message
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.Plan(step.cu.astype(np.float32), step.keys, step.block_table,
                      num_heads=HEADS, kv=step.kv)
    with pytest.raises(flashcpu.ShapeMismatchError):  # offsets past the indices
        flashcpu.Plan(step.cu, step.keys, step.flat_pages[:-1], num_heads=HEADS, kv=step.kv,
                      block_offsets=step.block_offsets)

    with step.plan() as plan:
        with pytest.raises(flashcpu.ShapeMismatchError) as caught:  # q of 2 heads
            flashcpu.attention_paged(step.q[:, :2], step.kv, plan, out=out)
        assert "heads" in caught.value.message
        with pytest.raises(flashcpu.ShapeMismatchError):  # q of other rows
            flashcpu.attention_paged(step.q[1:], step.kv, plan, out=out)
        with pytest.raises(flashcpu.ShapeMismatchError):
            flashcpu.attention_paged(step.q[None], step.kv, plan, out=out)
        with pytest.raises(flashcpu.UnsupportedDtypeError):
            flashcpu.attention_paged(step.q.astype(np.float64), step.kv, plan, out=out)
        with pytest.raises(flashcpu.ShapeMismatchError):
            flashcpu.attention_paged(step.q, step.kv, plan, sinks=np.zeros(3, np.float32),
                                     out=out)
        with pytest.raises(flashcpu.ShapeMismatchError):
            flashcpu.attention_paged(step.q, step.kv, plan, out=out,
                                     alibi_slopes=np.zeros((2, HEADS), np.float32))
        with pytest.raises(flashcpu.InvalidArgumentError) as caught:
            flashcpu.attention_paged(step.q, step.kv, plan, window=(-2, 0), out=out)
        assert "window" in caught.value.message
        with pytest.raises(flashcpu.ShapeMismatchError) as caught:  # another geometry
            other = Step(rng, page_size=4)
            flashcpu.attention_paged(step.q, other.kv, plan, out=out)
        assert "plan was made for" in caught.value.message
        with pytest.raises(flashcpu.ShapeMismatchError):
            flashcpu.attention_paged(step.q, step.kv, plan, out=out,
                                     additive_mask=np.zeros((HEADS, 3, 5), np.float32))
        with pytest.raises(flashcpu.UnsupportedDtypeError):
            flashcpu.attention_paged(step.q, step.kv, plan, out=out,
                                     additive_mask=np.zeros((1, 1), np.float64))
        # out overlapping the K pages
        aliased = step.k.reshape(-1)[:out.size].reshape(out.shape)
        k_before = step.k.copy()
        with pytest.raises(flashcpu.OverlapError) as caught:
            flashcpu.attention_paged(step.q, step.kv, plan, out=aliased)
        assert "kv->k" in caught.value.message
        assert (step.k == k_before).all()
        with pytest.raises(flashcpu.BadLayoutError):  # rows that share memory
            flashcpu.attention_paged(step.q, step.kv, plan, out=np.lib.stride_tricks.as_strided(
                out, strides=(0,) + out.strides[1:]))
        with pytest.raises(flashcpu.InvalidArgumentError) as caught:
            flashcpu.attention_paged(step.q, step.kv, plan,
                                     out=np.broadcast_to(out[:1], out.shape))
        assert "read-only" in caught.value.message
        with pytest.raises(flashcpu.InvalidArgumentError):
            flashcpu.attention_paged(step.q, step.kv, "not a plan", out=out)
    assert (out == 7.0).all()


def test_paged_kv_errors():
    k = np.zeros((4, 3, 2, 16), dtype=np.float32)
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.PagedKV(k, np.zeros((4, 2, 2, 16), dtype=np.float32))
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.PagedKV(k[0], k[0])
    with pytest.raises(flashcpu.BadLayoutError):
        flashcpu.PagedKV(np.asfortranarray(k), k)
    with pytest.raises(flashcpu.BadLayoutError):
        flashcpu.PagedKV(k[::-1], k)
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.PagedKV(k, k, layout="bshd")
    with pytest.raises(flashcpu.UnsupportedDtypeError):
        flashcpu.PagedKV(k.astype(np.float64), k)
    mixed = flashcpu.PagedKV(k, k.astype(np.float16), layout="hnd")
    assert mixed.geometry == (4, 2, 3, 16, 16) and "f32/f16" in repr(mixed)
    empty = flashcpu.PagedKV(np.zeros((0, 3, 2, 16), np.float32),
                             np.zeros((0, 3, 2, 16), np.float32))
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.Plan([0, 1], [1], [[0]], num_heads=2, kv=empty)
    assert "num_pages" in caught.value.message


# -------------------------------------------------------------- kv_append

def empty_caches(num_pages, page_size, layout, dtype=np.float32, dv=DIM):
    shape = (num_pages, page_size, KV_HEADS) if layout == "nhd" else (num_pages, KV_HEADS,
                                                                      page_size)
    return np.zeros(shape + (DIM,), dtype=dtype), np.zeros(shape + (dv,), dtype=dtype)


def slot_of(page, offset, page_size):
    return page * page_size + offset


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_kv_append_round_trip_equals_contiguous_attention(layout, page_size):
    """Two engine steps: prompts (a chunked one among them), then a decode
    token each; kv_append then attention_paged must equal
    flashcpu.attention on each request's contiguous K/V, bit for bit."""
    rng = np.random.default_rng(60 + page_size)
    prompts = [9, 1, 23, 4, 0, 40]
    capacity = [-(-(n + 4) // page_size) for n in prompts]
    num_pages = sum(capacity) + 3
    order = rng.permutation(num_pages)
    table = np.full((len(prompts), max(capacity)), -1, dtype=np.int32)
    at = 0
    for r, count in enumerate(capacity):
        table[r, :count] = order[at:at + count]
        at += count
    k_cache, v_cache = empty_caches(num_pages, page_size, layout)
    cache = flashcpu.PagedKV(k_cache, v_cache, layout=layout)
    history_k = [np.zeros((0, KV_HEADS, DIM), np.float32) for _ in prompts]
    history_v = [np.zeros((0, KV_HEADS, DIM), np.float32) for _ in prompts]

    def engine_step(new_rows):
        tokens = sum(new_rows)
        k_new = rng.standard_normal((tokens, KV_HEADS, DIM)).astype(np.float32)
        v_new = rng.standard_normal((tokens, KV_HEADS, DIM)).astype(np.float32)
        q = rng.standard_normal((tokens, HEADS, DIM)).astype(np.float32)
        slots, at = [], 0
        for r, rows in enumerate(new_rows):
            start = len(history_k[r])
            for j in range(start, start + rows):
                slots.append(slot_of(table[r, j // page_size], j % page_size, page_size))
            history_k[r] = np.concatenate([history_k[r], k_new[at:at + rows]])
            history_v[r] = np.concatenate([history_v[r], v_new[at:at + rows]])
            at += rows
        flashcpu.kv_append(k_new, v_new, np.asarray(slots, dtype=np.int64), cache)
        cu = np.concatenate([[0], np.cumsum(new_rows)]).astype(np.int32)
        lengths = [len(h) for h in history_k]
        with flashcpu.Plan(cu, lengths, table, num_heads=HEADS, kv=cache) as plan:
            out, lse = flashcpu.attention_paged(q, cache, plan, causal=True, return_lse=True)
        for r, rows in enumerate(new_rows):
            if rows == 0:
                continue
            rows_of = slice(cu[r], cu[r + 1])
            expected, expected_lse = flashcpu.attention(
                q[None, rows_of], history_k[r][None], history_v[r][None], causal=True,
                return_lse=True)
            np.testing.assert_array_equal(out[rows_of], expected[0])
            np.testing.assert_array_equal(lse[:, rows_of], expected_lse[0])

    engine_step(prompts)
    engine_step([1, 1, 1, 1, 1, 0])  # a decode token each; the last request waits
    engine_step([1, 2, 1, 0, 1, 1])


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_kv_append_converts_skips_and_writes_only_its_slots(layout):
    rng = np.random.default_rng(70)
    page_size, num_pages = 4, 5
    k_new = rng.standard_normal((6, KV_HEADS, DIM)).astype(np.float32)
    v_new = rng.standard_normal((6, KV_HEADS, 8)).astype(np.float32)
    slots = np.array([3, -1, 17, 0, -1, 19], dtype=np.int64)
    for dtype in ("f32", "f16", "bf16"):
        k_cache, v_cache = empty_caches(num_pages, page_size, layout,
                                        dtype={"f32": np.float32, "f16": np.float16,
                                               "bf16": np.uint16}[dtype], dv=8)
        k_cache[:] = 1  # sentinel (bf16 bits 0x0001 also)
        v_cache[:] = 1
        wrap = flashcpu.bf16 if dtype == "bf16" else (lambda x: x)
        cache = flashcpu.PagedKV(wrap(k_cache), wrap(v_cache), layout=layout)
        flashcpu.kv_append(k_new, v_new, slots.astype(np.int32), cache)  # int32: converted
        expected_k, expected_v = k_cache.copy(), v_cache.copy()
        expected_k[:] = 1
        expected_v[:] = 1
        for t, slot in enumerate(slots):
            if slot < 0:
                continue
            page, offset = divmod(int(slot), page_size)
            index = (page, offset) if layout == "nhd" else (page, slice(None), offset)
            if dtype == "bf16":
                expected_k[index] = reference.f32_to_bf16(k_new[t])
                expected_v[index] = reference.f32_to_bf16(v_new[t])
            else:
                expected_k[index] = k_new[t].astype(k_cache.dtype)
                expected_v[index] = v_new[t].astype(v_cache.dtype)
        np.testing.assert_array_equal(k_cache, expected_k)
        np.testing.assert_array_equal(v_cache, expected_v)


def test_kv_append_from_bf16_and_strided_rows():
    rng = np.random.default_rng(71)
    k_cache, v_cache = empty_caches(3, 2, "nhd")
    cache = flashcpu.PagedKV(k_cache, v_cache)
    bits = reference.f32_to_bf16(rng.standard_normal((3, KV_HEADS, DIM)))
    wide = rng.standard_normal((3, KV_HEADS, DIM + 4)).astype(np.float32)
    flashcpu.kv_append(flashcpu.bf16(bits), wide[..., :DIM], [5, 0, 2], cache)
    np.testing.assert_array_equal(k_cache[2, 1], reference.bf16_to_f32(bits[0]))
    np.testing.assert_array_equal(k_cache[0, 0], reference.bf16_to_f32(bits[1]))
    np.testing.assert_array_equal(v_cache[1, 0], wide[2, :, :DIM])
    flashcpu.kv_append(np.zeros((0, KV_HEADS, DIM), np.float32),
                       np.zeros((0, KV_HEADS, DIM), np.float32), [], cache)


def test_kv_append_errors_leave_the_cache_untouched():
    rng = np.random.default_rng(72)
    k_cache, v_cache = empty_caches(3, 4, "nhd")
    cache = flashcpu.PagedKV(k_cache, v_cache)
    k_new = rng.standard_normal((3, KV_HEADS, DIM)).astype(np.float32)
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.kv_append(k_new, k_new, [1, 7, 1], cache)
    assert "slot_mapping[0] and slot_mapping[2]" in caught.value.message
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.kv_append(k_new, k_new, [1, 12, 2], cache)
    assert "slot_mapping[1] is 12" in caught.value.message
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.kv_append(k_new, k_new, [1, -2, 2], cache)
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.kv_append(k_new, k_new, [1, 2], cache)
    with pytest.raises(flashcpu.ShapeMismatchError) as caught:  # heads
        flashcpu.kv_append(k_new[:, :1], k_new[:, :1], [1, 2, 3], cache)
    assert "k_new" in caught.value.message
    with pytest.raises(flashcpu.ShapeMismatchError):
        flashcpu.kv_append(k_new, k_new[:2], [1, 2, 3], cache)
    with pytest.raises(flashcpu.OverlapError):  # new rows inside the cache
        flashcpu.kv_append(k_cache[0, :3], k_new, [4, 5, 6], cache)
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.kv_append(k_new, k_new, [1.0, 2.0, 3.0], cache)
    assert (k_cache == 0).all() and (v_cache == 0).all()
    k_cache.flags.writeable = False
    with pytest.raises(flashcpu.InvalidArgumentError) as caught:
        flashcpu.kv_append(k_new, k_new, [1, 2, 3], cache)
    assert "read-only" in caught.value.message
    assert (v_cache == 0).all()


def test_plan_of_one_dtype_serves_layers_of_others():
    """A Plan made for f32 q runs an f16 q and a bf16 out too (a C plan of
    their own, made on first use), with the bytes of a Plan made for them."""
    rng = np.random.default_rng(52)
    step = Step(rng, dtype="f32")
    q16 = step.q.astype(np.float16)
    with step.plan() as plan, step.plan(q_dtype=np.float16, out_dtype="bfloat16") as fresh:
        f32 = flashcpu.attention_paged(step.q, step.kv, plan, causal=True)
        out = flashcpu.bf16(np.zeros((step.tokens, HEADS, DIM), dtype=np.uint16))
        flashcpu.attention_paged(q16, step.kv, plan, causal=True, out=out)
        again = flashcpu.bf16(np.zeros((step.tokens, HEADS, DIM), dtype=np.uint16))
        flashcpu.attention_paged(q16, step.kv, fresh, causal=True, out=again)
        assert np.array_equal(out.array, again.array)
        assert np.any(out.array)  # written
        assert np.array_equal(f32, flashcpu.attention_paged(step.q, step.kv, plan, causal=True))
    for bad in ("int8", np.int32, "float64"):
        with pytest.raises(flashcpu.UnsupportedDtypeError, match="q_dtype"):
            step.plan(q_dtype=bad)
    with pytest.raises(flashcpu.UnsupportedDtypeError, match="out_dtype"):
        step.plan(out_dtype="f32")
