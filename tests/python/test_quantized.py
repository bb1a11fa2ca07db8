"""Quantized K/V from Python: flashcpu.quantize, dequantize, Quantized and
attention over quantized codes, against a numpy decoding of the formats
written here from their definitions (include/flashcpu/flashcpu.h)."""

import numpy as np
import pytest

import flashcpu
import reference
from test_attention import check, inputs

FORMATS = ["i8", "u8", "f8_e4m3", "f8_e5m2", "q8_0"]


def decode_f8(codes, fmt):
    """OCP fp8 bytes as float64: E4M3 (bias 7, no inf, S.1111.111 NaN) or
    E5M2 (bias 15, exponent 31: inf or NaN)."""
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    bits, bias = (3, 7) if fmt == "f8_e4m3" else (2, 15)
    exponent = (c >> bits) & ((1 << (7 - bits)) - 1)
    mantissa = c & ((1 << bits) - 1)
    fraction = mantissa / (1 << bits)
    values = np.where(exponent == 0, sign * fraction * 2.0 ** (1 - bias),
                      sign * (1 + fraction) * 2.0 ** (exponent - bias))
    if fmt == "f8_e4m3":
        values[(exponent == 15) & (mantissa == 7)] = np.nan
    else:
        top = exponent == 31
        values[top] = np.where(mantissa[top] == 0, sign[top] * np.inf, np.nan)
    return values


def decode(x):
    """The values a flashcpu.Quantized stands for, [B, S, H, D], computed
    in f32 as the definition reads: (code - zero) * scale, each step
    rounded (codes and block scales are exact in f32)."""
    codes = np.asarray(x.codes)
    if x.format == "q8_0":  # per 32 values: an f16 scale, then 32 int8
        blocks = codes.view(np.uint8).reshape(codes.shape[:-1] + (-1, 34))
        scale = blocks[..., :2].copy().view("<f2").astype(np.float32)
        values = blocks[..., 2:].copy().view(np.int8).astype(np.float32) * scale
        return values.reshape(codes.shape[:-1] + (-1,))
    if x.format in ("f8_e4m3", "f8_e5m2"):
        values = decode_f8(codes.view(np.uint8), x.format).astype(np.float32)
    else:
        values = codes.astype(np.float32)
    if x.zero_points is not None:
        values = values - np.asarray(x.zero_points, dtype=np.float32)
    if x.scales is not None:
        values = values * np.asarray(x.scales, dtype=np.float32)
    return values


def score_rounding(q, k_values, v_values, scale=None, v=None):
    """The tolerance for an int8 or uint8 K: decode's integer kernels (AVX2,
    AVX512-VNNI) round each q row to 15-bit integers (within 2^-15 of its
    largest element; the header's one exception), which moves a score by at
    most scale * 2^-15 * max|q| * sum_d |k_d|, and the output by at most
    twice that times max|v|. Where V (v, quantized) is int8 or uint8 too,
    they round each 16-key block's weights times the V row scales to int16
    (the AMX-INT8 kernel each 64-key group's, to 15 bits): at most 64 r /
    65278 max|v| more (r: the largest V row scale over the smallest), twice
    that allowed."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    score = scale * 2.0 ** -15 * np.abs(q).max() * np.abs(k_values).sum(axis=-1).max()
    tolerance = 2e-5 + 2 * score * np.abs(v_values).max()
    if v is not None and v.format in ("i8", "u8"):
        scales = np.asarray(v.scales, dtype=np.float64) if v.scales is not None else np.ones(1)
        ratio = np.abs(scales).max() / np.abs(scales).min()
        tolerance += 2 * 64 * ratio / 65278 * np.abs(v_values).max()
    return tolerance


def largest_error(fmt, x):
    """How far quantize may put a value from x, per token and head row."""
    top = np.abs(x).max(axis=-1, keepdims=True)
    if fmt in ("i8", "q8_0"):
        return top / 127 * 0.5 * 1.001
    if fmt == "u8":
        return (x.max(axis=-1, keepdims=True) - x.min(axis=-1, keepdims=True)) / 255 * 0.51
    return top * (2.0 ** -4 if fmt == "f8_e4m3" else 2.0 ** -3) * 1.001


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_dequantize_and_attention(fmt):
    rng = np.random.default_rng(FORMATS.index(fmt))
    q, k, v = inputs(rng, dim=64)
    kq, vq = flashcpu.quantize(k, fmt), flashcpu.quantize(v, fmt)
    assert isinstance(kq, flashcpu.Quantized) and kq.format == fmt
    assert kq.shape == k.shape
    if fmt == "q8_0":
        assert kq.codes.shape == k.shape[:3] + (64 // 32 * 34,) and kq.scales is None
    else:
        assert kq.codes.shape == k.shape and kq.scales.shape == k.shape[:3] + (1,)
        assert (kq.zero_points is not None) == (fmt == "u8")
    # dequantize is the formats' definition, bit for bit in f32
    for x, original in ((kq, k), (vq, v)):
        values = flashcpu.dequantize(x)
        np.testing.assert_array_equal(values, decode(x))
        assert np.all(np.abs(values - original) <= largest_error(fmt, original))
    # attention is over the dequantized values
    atol = score_rounding(q, decode(kq), decode(vq), v=vq) if fmt in ("i8", "u8") else 2e-5
    for options in ({}, {"causal": True}, {"kv_lengths": [37, 9]}):
        out, lse = flashcpu.attention(q, kq, vq, return_lse=True, **options)
        check(out, lse, *reference.attention(q, decode(kq), decode(vq), **options), atol=atol)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_empty_tensors_quantize_and_dequantize_to_empty_arrays(fmt, layout):
    # numpy's strides for an empty array repeat (seq 0 of [2, 0, 1, 64]:
    # every stride 64): valid, and nothing is written
    shape = (2, 0, 1, 64) if layout == "bshd" else (2, 1, 0, 64)
    x = np.zeros(shape, dtype=np.float32)
    q = flashcpu.quantize(x, fmt, layout=layout)
    codes_shape = shape[:3] + ((68,) if fmt == "q8_0" else (64,))
    assert q.codes.shape == codes_shape
    if fmt != "q8_0":
        assert q.scales.shape == shape[:3] + (1,)
    for dtype in ("f32", "f16", "bf16"):
        values = flashcpu.dequantize(q, dtype=dtype, layout=layout)
        assert np.asarray(values).shape == shape
    # into arrays given, which stay as they were
    out = np.full(codes_shape, 7, dtype=np.uint8 if fmt != "i8" else np.int8)
    scales = None if fmt == "q8_0" else np.full(shape[:3] + (1,), 5, dtype=np.float16)
    zero_points = np.full_like(scales, 3) if fmt == "u8" else None
    q = flashcpu.quantize(x, fmt, out=out, scales=scales, zero_points=zero_points,
                          layout=layout)
    assert q.codes is out
    back = np.full(shape, 9, dtype=np.float32)
    assert flashcpu.dequantize(q, out=back, layout=layout) is back


def test_k_quantized_v_float_and_plain_int8_codes():
    rng = np.random.default_rng(11)
    q, k, v = inputs(rng)
    kq = flashcpu.quantize(k, "i8")
    out, lse = flashcpu.attention(q, kq, v, return_lse=True, causal=True)
    check(out, lse, *reference.attention(q, decode(kq), v, causal=True),
          atol=score_rounding(q, decode(kq), v))
    codes = rng.integers(-127, 128, size=k.shape).astype(np.int8)  # scale 1
    out, lse = flashcpu.attention(q, codes, v, return_lse=True, scale=0.02)
    check(out, lse, *reference.attention(q, codes, v, scale=0.02),
          atol=score_rounding(q, codes, v, 0.02))


def test_read_scales_per_head_per_channel_and_per_tensor():
    rng = np.random.default_rng(12)
    q, k, v = inputs(rng)
    per_head = np.array([[0.02], [0.03]], dtype=np.float32)  # [H, 1]
    per_channel = (0.01 + 0.02 * rng.random((2, 16))).astype(np.float32)  # [H, D]
    per_tensor = np.array([0.04], dtype=np.float16)
    for scales in (per_head, per_channel, per_tensor):
        kq = flashcpu.quantize(k, "i8", scales=scales)
        assert kq.scales is scales  # read, in place
        np.testing.assert_array_equal(flashcpu.dequantize(kq), decode(kq))
        out, lse = flashcpu.attention(q, kq, v, return_lse=True)
        check(out, lse, *reference.attention(q, decode(kq), v),
              atol=score_rounding(q, decode(kq), v))
    e4m3 = flashcpu.quantize(v, "f8_e4m3", scales=per_head)
    out, lse = flashcpu.attention(q, k, e4m3, return_lse=True)
    check(out, lse, *reference.attention(q, k, decode(e4m3)))


def test_codes_given_as_arrays_with_their_scales():
    rng = np.random.default_rng(13)
    q, k, v = inputs(rng)
    codes = rng.integers(0, 256, size=v.shape).astype(np.uint8)
    scales = (0.01 + 0.01 * rng.random(v.shape[:3] + (1,))).astype(np.float32)
    zero = np.full_like(scales, 128.0)
    vq = flashcpu.Quantized(codes, scales=scales, zero_points=zero)
    assert vq.format == "u8"
    out, lse = flashcpu.attention(q, k, vq, return_lse=True)
    check(out, lse, *reference.attention(q, k, decode(vq)))
    finite = codes & 0x77  # no NaN pattern (S.1111.111) among them
    e4m3 = flashcpu.Quantized(finite, "f8_e4m3", scales=scales)
    out, lse = flashcpu.attention(q, k, e4m3, return_lse=True)
    check(out, lse, *reference.attention(q, k, decode(e4m3)))


def test_bhsd_layout_matches_bshd():
    rng = np.random.default_rng(14)
    q, k, v = inputs(rng, dim=32)
    kq = flashcpu.quantize(k.transpose(0, 2, 1, 3), "q8_0", layout="bhsd")
    vq = flashcpu.quantize(v.transpose(0, 2, 1, 3), "u8", layout="bhsd")
    assert vq.scales.shape == (2, 2, 37, 1)
    out = flashcpu.attention(q.transpose(0, 2, 1, 3), kq, vq, layout="bhsd", causal=True)
    same = flashcpu.attention(q, flashcpu.quantize(k, "q8_0"), flashcpu.quantize(v, "u8"),
                              causal=True)
    np.testing.assert_array_equal(out.transpose(0, 2, 1, 3), same)


def test_dequantize_into_out_and_to_bf16():
    rng = np.random.default_rng(15)
    _, k, _ = inputs(rng)
    kq = flashcpu.quantize(k, "f8_e5m2", scales=None)  # scale 1
    out = np.zeros_like(k)
    assert flashcpu.dequantize(kq, out=out) is out
    np.testing.assert_array_equal(out, decode(kq))
    bits = flashcpu.dequantize(kq, dtype="bf16")
    assert bits.dtype == np.uint16
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(widened, out)  # e5m2 values are exact in bf16


def test_errors_leave_outputs_untouched():
    rng = np.random.default_rng(16)
    q, k, v = inputs(rng, dim=48)
    with pytest.raises(flashcpu.InvalidArgumentError, match="format"):
        flashcpu.quantize(k, "int4")
    with pytest.raises(flashcpu.InvalidArgumentError, match="zero points"):
        flashcpu.Quantized(k.astype(np.int8), scales=np.ones(1, np.float32),
                           zero_points=np.ones(1, np.float32))
    with pytest.raises(flashcpu.InvalidArgumentError, match="q8_0"):
        flashcpu.Quantized(np.zeros((2, 37, 2, 34), np.uint8), "q8_0",
                           scales=np.ones(1, np.float32))
    with pytest.raises(flashcpu.UnsupportedDtypeError):
        flashcpu.Quantized(k)  # float32 names no format
    codes = np.full((2, 37, 2, 51), 7, np.uint8)  # 51 bytes: no whole blocks
    with pytest.raises(flashcpu.BadLayoutError, match="34-byte"):
        flashcpu.dequantize(flashcpu.Quantized(codes, "q8_0"))
    with pytest.raises(flashcpu.ShapeMismatchError, match="blocks of 32"):
        flashcpu.quantize(k, "q8_0")
    out = np.full((2, 37, 2, 48 // 32 * 34 + 34), 5, np.uint8)
    with pytest.raises(flashcpu.ShapeMismatchError):  # 3 blocks for 48 values
        flashcpu.quantize(k, "q8_0", out=out)
    assert np.all(out == 5)
    bad = flashcpu.Quantized(k.astype(np.int8), scales=np.ones((3, 1), np.float32))
    target = np.full((2, 5, 4, 48), 9.0, np.float32)
    with pytest.raises(flashcpu.ShapeMismatchError, match="broadcast"):
        flashcpu.attention(q, bad, v, out=target)
    assert np.all(target == 9.0)
    codes = np.full(k.shape, 3, np.int8)
    with pytest.raises(flashcpu.InvalidArgumentError):  # read scales must be > 0
        flashcpu.quantize(k, "i8", scales=np.zeros(1, np.float32), out=codes)
    assert np.all(codes == 3)


def test_scales_written_per_token_must_be_writable():
    rng = np.random.default_rng(20)
    _, k, _ = inputs(rng)
    frozen = np.ones(k.shape[:3] + (1,), np.float32)
    frozen.setflags(write=False)
    codes = np.full(k.shape, 3, np.int8)
    with pytest.raises(flashcpu.InvalidArgumentError, match="read-only"):
        flashcpu.quantize(k, "i8", scales=frozen, out=codes)
    assert np.all(frozen == 1.0) and np.all(codes == 3)
    zeros = np.zeros(k.shape[:3] + (1,), np.float32)
    zeros.setflags(write=False)
    with pytest.raises(flashcpu.InvalidArgumentError, match="zero points"):
        flashcpu.quantize(k, "u8", scales=np.ones(k.shape[:3] + (1,), np.float32),
                          zero_points=zeros)
    assert np.all(zeros == 0.0)
    # scales that are read, not written (per tensor), may be read-only
    per_tensor = np.broadcast_to(np.float32(0.05), (1,))
    flashcpu.quantize(k, "i8", scales=per_tensor)


def test_codes_wider_than_a_byte_are_refused():
    rng = np.random.default_rng(21)
    q, k, v = inputs(rng)
    kq = flashcpu.quantize(k, "i8")
    for wide in (kq.codes.astype(np.int16), kq.codes.astype(np.float32),
                 kq.codes.astype(bool)):
        with pytest.raises(flashcpu.UnsupportedDtypeError, match="codes"):
            flashcpu.Quantized(wide, "i8", scales=kq.scales)
    out = np.zeros(k.shape, np.float32)
    with pytest.raises(flashcpu.UnsupportedDtypeError, match="codes"):
        flashcpu.quantize(k, "i8", out=out)
    assert not out.any()


@pytest.mark.parametrize("fmt,dim", [("i8", 32), ("u8", 32), ("f8_e5m2", 32), ("q8_0", 32),
                                     ("i8", 64), ("u8", 128)])
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_quantized_pages(fmt, dim, layout, monkeypatch):
    import test_paged
    monkeypatch.setattr(test_paged, "DIM", dim)  # 32: a q8_0 block; 64, 128: AMX-INT8 decode
    rng = np.random.default_rng(17)
    step = test_paged.Step(rng, page_size=4, layout=layout)
    tensor_layout = "bshd" if layout == "nhd" else "bhsd"
    kq = flashcpu.quantize(step.k, fmt, layout=tensor_layout)
    vq = flashcpu.quantize(step.v, "i8" if fmt == "q8_0" else fmt, layout=tensor_layout)
    pages = flashcpu.PagedKV(kq, vq, layout=layout)
    assert fmt in repr(pages)
    with flashcpu.Plan(step.cu, step.keys, step.block_table, num_heads=step.heads,
                       kv=pages) as plan:
        out, lse = flashcpu.attention_paged(step.q, pages, plan, return_lse=True,
                                            causal=True)
    expected = reference.paged_attention(step.q_values, decode(kq), decode(vq), step.cu,
                                         step.keys, step.block_table, layout=layout,
                                         causal=True)
    q = np.asarray(step.q_values)
    atol = score_rounding(q, decode(kq), decode(vq), v=vq) if fmt in ("i8", "u8") else 2e-5
    check(out, lse, *expected, atol=atol)


@pytest.mark.parametrize("fmt", ["i8", "u8", "f8_e4m3", "q8_0"])
@pytest.mark.parametrize("pages,page_size", [(6, 4), (24, 1)])
def test_kv_append_into_quantized_pages(fmt, pages, page_size):
    rng = np.random.default_rng(18)
    heads, dim = 2, 32
    codes = np.zeros((pages, page_size, heads, dim // 32 * 34 if fmt == "q8_0" else dim),
                     np.int8 if fmt == "i8" else np.uint8)
    scales = None if fmt == "q8_0" else np.zeros((pages, page_size, heads, 1), np.float32)
    zero = np.zeros_like(scales) if fmt == "u8" else None
    kq = flashcpu.Quantized(codes, fmt, scales=scales, zero_points=zero)
    vq = flashcpu.Quantized(codes.copy(), fmt,
                            scales=None if scales is None else scales.copy(),
                            zero_points=None if zero is None else zero.copy())
    cache = flashcpu.PagedKV(kq, vq)
    k_new = rng.standard_normal((5, heads, dim)).astype(np.float32)
    v_new = rng.standard_normal((5, heads, dim)).astype(np.float32)
    slots = np.array([9, 0, -1, 23, 4])
    flashcpu.kv_append(k_new, v_new, slots, cache)
    for x, rows in ((kq, k_new), (vq, v_new)):
        # each row as flashcpu.quantize writes it, a token of its own
        alone = flashcpu.quantize(rows[:, None], fmt)
        written = decode(x).reshape(pages * page_size, heads, dim)
        for t, slot in enumerate(slots):
            if slot >= 0:
                np.testing.assert_array_equal(written[slot], decode(alone)[t, 0])
        untouched = np.setdiff1d(np.arange(pages * page_size), slots)
        assert np.all(written[untouched] == 0)
    if fmt == "i8":  # per-token scales are written: a read-only array is refused
        read_only = np.ones((pages, page_size, heads, 1), np.float32)
        read_only.flags.writeable = False
        before = codes.copy()
        fixed = flashcpu.PagedKV(flashcpu.Quantized(codes, fmt, scales=read_only), vq)
        with pytest.raises(flashcpu.InvalidArgumentError, match="read-only"):
            flashcpu.kv_append(k_new, v_new, slots, fixed)
        np.testing.assert_array_equal(codes, before)
