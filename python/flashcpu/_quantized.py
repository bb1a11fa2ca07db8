"""Quantized K/V ("quantized K/V" in include/flashcpu/flashcpu.h):
flashcpu.Quantized (codes with their format, scales and zero points),
flashcpu.quantize and flashcpu.dequantize."""

import ctypes

from . import _arrays, _context, errors
from ._library import KvScales, Tensor

_lib = None  # set by __init__

I8, U8, F8_E4M3, F8_E5M2, Q8_0 = 3, 4, 5, 6, 7
FORMATS = {"i8": I8, "u8": U8, "f8_e4m3": F8_E4M3, "f8_e5m2": F8_E5M2, "q8_0": Q8_0}
Q8_0_BLOCK, Q8_0_BYTES = 32, 34  # values per block; an f16 scale and 32 int8


def _fail(cls, status, message):
    raise cls(status, message)


_FORMATS_OF = {}  # (kind, dtype object) -> format or None


def _inferred_format(codes):
    """The format a codes array's own dtype names, or None."""
    torch_kind = _arrays.kind_of(codes) == "torch"
    key = (torch_kind, codes.dtype)
    if key in _FORMATS_OF:
        return _FORMATS_OF[key]
    if torch_kind:
        import torch
        table = {torch.int8: "i8", torch.uint8: "u8"}
        for name, fmt in (("float8_e4m3fn", "f8_e4m3"), ("float8_e5m2", "f8_e5m2")):
            if hasattr(torch, name):
                table[getattr(torch, name)] = fmt
        fmt = table.get(codes.dtype)
    else:
        fmt = {"int8": "i8", "uint8": "u8", "float8_e4m3fn": "f8_e4m3",
               "float8_e5m2": "f8_e5m2"}.get(codes.dtype.name)  # ml_dtypes
    _FORMATS_OF[key] = fmt
    return fmt


class Quantized:
    """A quantized K or V: codes in one of flashcpu's formats, and the scales
    (and, for "u8", zero points) that map them to values:
        value = (code - zero) * scale
    codes: [B, S, H, D] (or layout "bhsd" order) int8 ("i8"), uint8 ("u8",
    or the bytes of "f8_e4m3" / "f8_e5m2"), torch.float8_e4m3fn /
    float8_e5m2, or for "q8_0" llama.cpp's blocks as bytes, [..., D / 32 *
    34] uint8 or int8 (the last dim holds the row's blocks; D = its size /
    34 * 32). format: "i8", "u8", "f8_e4m3", "f8_e5m2" or "q8_0"; inferred
    from the codes' dtype when it names one (int8, uint8, torch float8).
    scales and zero_points: float32, float16 or bfloat16 arrays or tensors
    that broadcast to the codes' [B, S, H, D] shape (numpy rules, so
    per tensor [1], per head [H, 1], per token [B, S, H, 1], per channel
    [H, D] in "bshd"), read in place; None: scale 1, zero 0. "q8_0" carries
    its scales in its blocks and takes none.
    Pass it as k or v to flashcpu.attention; flashcpu.quantize returns one."""

    def __init__(self, codes, format=None, scales=None, zero_points=None):  # noqa: A002
        fmt = format if format is not None else _inferred_format(codes)
        if fmt not in FORMATS:
            _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
                  f"quantized format {format!r}: expected one of {sorted(FORMATS)}"
                  if format is not None else
                  f"codes of dtype {codes.dtype} name no quantized format: give "
                  f"format= one of {sorted(FORMATS)}")
        if fmt == "q8_0" and (scales is not None or zero_points is not None):
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  "q8_0 carries its scales in its blocks: give no scales or zero points")
        if zero_points is not None and fmt != "u8":
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  "zero points are for the u8 format only")
        if zero_points is not None and scales is None:
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  "zero points need scales of the same shape")
        _check_code_bytes(codes, fmt)
        self.codes, self.format = codes, fmt
        self.scales, self.zero_points = scales, zero_points

    @property
    def shape(self):
        """The values' shape: the codes' (q8_0: the last dim in values)."""
        shape = tuple(_arrays.geometry(self.codes)[0])
        if self.format == "q8_0":
            return shape[:-1] + (shape[-1] // Q8_0_BYTES * Q8_0_BLOCK,)
        return shape

    def __repr__(self):
        return (f"flashcpu.Quantized({self.format}, shape={list(self.shape)}, "
                f"scales={'none' if self.scales is None else 'given'})")


def _check_code_bytes(codes, fmt):
    """Codes are read a byte each: their array must hold 1-byte elements
    (int8, uint8, float8), not wider ones whose bytes would be misread."""
    raw = _arrays.raw(codes)
    if _arrays.kind_of_or_none(raw) == "torch":
        dtype, size = raw.dtype, raw.element_size()
    elif hasattr(raw, "dtype"):
        dtype, size = raw.dtype, raw.dtype.itemsize
    else:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{fmt} codes must be a numpy array or a torch tensor, not "
              f"{type(codes).__name__}")
    if size != 1 or str(dtype) in ("bool", "torch.bool"):
        _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
              f"{fmt} codes must be int8, uint8 or float8, not {dtype}")


def check_written_scales(x, view, what):
    """The scales (and zero points) of a Quantized that a call writes (they
    vary by token and not by channel) must be writable."""
    if view is not None and view.strides[1] != 0 and view.strides[3] == 0:
        _arrays.check_writable(x.scales, f"{what}'s scales")
        if x.zero_points is not None:
            _arrays.check_writable(x.zero_points, f"{what}'s zero points")


def is_quantized(x):
    """Whether x is read as quantized codes: a Quantized, or an array whose
    dtype names a format (int8, uint8, float8)."""
    if isinstance(x, Quantized):
        return True
    if _arrays.is_plain_float(x):
        return False
    if isinstance(x, _arrays.bf16) or _arrays.kind_of_or_none(x) is None:
        return False
    return _inferred_format(x) is not None


def as_quantized(x):
    return x if isinstance(x, Quantized) else Quantized(x)


def codes_view(x, layout, what):
    """A flashcpu_tensor over a Quantized's codes, dims and strides in
    values as the C API counts them."""
    shape, strides, address = _arrays.geometry(x.codes)
    if len(shape) != 4:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"{what} has {len(shape)} dims; expected 4 ({layout})")
    if shape[3] > 1 and strides[3] != 1:
        _fail(errors.BadLayoutError, "BAD_LAYOUT",
              f"{what}'s last dim (head_dim) must be contiguous (stride {strides[3]})")
    dims, steps = list(shape), list(strides)
    if x.format == "q8_0":  # bytes of 34-byte blocks -> values
        if dims[3] % Q8_0_BYTES or any(s % Q8_0_BYTES for s in steps[:3]):
            _fail(errors.BadLayoutError, "BAD_LAYOUT",
                  f"{what} (q8_0): the last dim ({dims[3]} bytes) and every other "
                  f"stride must be whole 34-byte blocks")
        dims[3] = dims[3] // Q8_0_BYTES * Q8_0_BLOCK
        steps = [s // Q8_0_BYTES * Q8_0_BLOCK for s in steps[:3]] + [1]
    order = (0, 1, 2, 3) if layout == "bshd" else (0, 2, 1, 3)
    t = Tensor(address or ctypes.addressof(_arrays._EMPTY), FORMATS[x.format])
    for i, axis in enumerate(order):
        t.dims[i], t.strides[i] = dims[axis], steps[axis]
    t.strides[3] = 1
    return t


def _float_code(values, what):
    """The float dtype code of scales or zero points."""
    try:
        return _arrays.dtype_of(values)
    except errors.UnsupportedDtypeError:
        _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
              f"{what} must be float32, float16 or bfloat16, not "
              f"{_arrays.raw(values).dtype}")


def _broadcast(values, shape, what):
    """(address, dtype code, strides in elements, array kept) of values
    broadcast to shape (no copy: broadcast dims get stride 0)."""
    if _arrays.kind_of_or_none(values) == "torch":
        if values.device.type != "cpu":
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"{what} must be on the CPU, not {values.device}")
        code = _float_code(values, what)
        try:
            full = values.detach().expand(shape)
        except RuntimeError:
            _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
                  f"{what} of shape {list(values.shape)} does not broadcast to {list(shape)}")
        return full.data_ptr(), code, tuple(full.stride()), values
    import numpy
    if not isinstance(values, _arrays.bf16):
        values = numpy.asarray(values)
    code, array = _float_code(values, what), _arrays.raw(values)
    try:
        full = numpy.broadcast_to(array, shape)
    except ValueError:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"{what} of shape {list(array.shape)} does not broadcast to {list(shape)}")
    if any(s < 0 or s % full.itemsize for s in full.strides):
        _fail(errors.BadLayoutError, "BAD_LAYOUT", f"{what} has a negative or odd stride")
    return full.ctypes.data, code, tuple(s // full.itemsize for s in full.strides), array


def scales_view(x, layout, what, keep):
    """A KvScales for a Quantized's scales, or None for scale 1."""
    if x.scales is None:
        return None
    shape = x.shape
    address, code, strides, kept = _broadcast(x.scales, shape, f"{what} scales")
    keep.append(kept)
    order = (0, 1, 2, 3) if layout == "bshd" else (0, 2, 1, 3)
    view = KvScales(address, code)
    for i, axis in enumerate(order):
        view.strides[i] = strides[axis]
    # Broadcasting gives a seq (page slot) dim of extent 1 stride 0; scales
    # that vary by batch (page) and not by channel then vary by token, which
    # the C API tells by a non-zero seq stride (index 0: the value is moot).
    if shape[order[1]] == 1 and view.strides[0] != 0 and view.strides[3] == 0:
        view.strides[1] = 1
    if x.zero_points is not None:
        zero, zero_code, zero_strides, kept = _broadcast(
            x.zero_points, shape, f"{what} zero points")
        if zero_code != code or zero_strides != strides:
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"{what} zero points must have the scales' dtype and shape")
        view.zero_points = zero
        keep.append(kept)
    keep.append(view)
    return view


def _new_codes(like, shape, fmt):
    """A new codes array for values of shape, like's kind."""
    if fmt == "q8_0":
        shape = tuple(shape[:-1]) + (shape[-1] // Q8_0_BLOCK * Q8_0_BYTES,)
    if _arrays.kind_of(like) == "torch":
        import torch
        dtype = {"i8": torch.int8, "u8": torch.uint8, "q8_0": torch.uint8,
                 "f8_e4m3": getattr(torch, "float8_e4m3fn", torch.uint8),
                 "f8_e5m2": getattr(torch, "float8_e5m2", torch.uint8)}[fmt]
        return torch.empty(shape, dtype=dtype)
    import numpy
    return numpy.empty(shape, dtype=numpy.int8 if fmt == "i8" else numpy.uint8)


def _new_scales(like, shape, fmt):
    """float32 scales (and zero points for u8), one per token and head."""
    token = (shape[0], shape[1], shape[2], 1)
    return (_arrays.empty_like_kind(like, token, _arrays.F32),
            _arrays.empty_like_kind(like, token, _arrays.F32) if fmt == "u8" else None)


def quantize(src, format, *, scales="token", zero_points=None, out=None,  # noqa: A002
             layout="bshd", context=None):
    """src (float32, float16 or bfloat16, [B, S, H, D] or layout "bhsd")
    quantized into a flashcpu.Quantized of format "i8", "u8", "f8_e4m3",
    "f8_e5m2" or "q8_0", rounded to nearest even, beyond the format's range
    saturated (flashcpu_quantize).
    scales: "token" (default) computes one float32 scale per token and head
    (u8: with a zero point), in new arrays [B, S, H, 1] ("bshd") or
    [B, H, S, 1] ("bhsd"); an array or tensor broadcastable to src's shape
    is read (per tensor, per head, per channel; finite and > 0), or written
    where it varies by token alone (then u8 needs zero_points of its shape);
    None: scale 1. q8_0 takes scales=None or "token" (its blocks carry
    them). out: the codes array to write ([..., D / 32 * 34] bytes for
    q8_0); else a new one of src's kind. Nothing is written on error."""
    if format not in FORMATS:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"quantized format {format!r}: expected one of {sorted(FORMATS)}")
    if layout not in ("bshd", "bhsd"):
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"layout {layout!r}: expected \"bshd\" or \"bhsd\"")
    ctx = _context.resolve(context)
    source = _arrays.view(src, layout, "src")
    shape = tuple(_arrays.geometry(src)[0])
    if isinstance(scales, str):
        if scales != "token":
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"scales {scales!r}: expected \"token\", None or an array")
        if format == "q8_0":
            scales = None
        else:
            scales, zero_points = _new_scales(_arrays.raw(src), shape, format)
    if format == "q8_0" and shape[3] % Q8_0_BLOCK:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"q8_0 stores whole blocks of 32 values; head_dim is {shape[3]}")
    if out is None:
        out = _new_codes(_arrays.raw(src), shape, format)
    _arrays.check_writable(out, "out")
    result = Quantized(out, format, scales, zero_points)
    if result.shape != shape:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"out holds values of shape {list(result.shape)}; src is {list(shape)}")
    keep = []
    target = codes_view(result, layout, "out")
    view = scales_view(result, layout, "out", keep)
    check_written_scales(result, view, "out")
    _context.check(_lib.flashcpu_quantize(
        ctx.handle, ctypes.byref(source), ctypes.byref(target),
        None if view is None else ctypes.byref(view)), ctx.handle)
    return result


def dequantize(x, *, dtype="f32", out=None, layout="bshd", context=None):
    """The values attention reads from x (a flashcpu.Quantized, or int8 /
    uint8 / float8 codes at scale 1) as float32, float16 or bfloat16
    (dtype "f32", "f16", "bf16"), in out or a new array of the codes'
    kind (flashcpu_dequantize)."""
    x = as_quantized(x)
    if layout not in ("bshd", "bhsd"):
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"layout {layout!r}: expected \"bshd\" or \"bhsd\"")
    codes = {"f32": _arrays.F32, "f16": _arrays.F16, "bf16": _arrays.BF16}
    if dtype not in codes:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"dtype {dtype!r}: expected \"f32\", \"f16\" or \"bf16\"")
    ctx = _context.resolve(context)
    keep = []
    source = codes_view(x, layout, "x")
    view = scales_view(x, layout, "x", keep)
    if out is None:
        out = _new_values(_arrays.raw(x.codes), x.shape, codes[dtype])
    _arrays.check_writable(out, "out")
    target = _arrays.view(out, layout, "out")
    _context.check(_lib.flashcpu_dequantize(
        ctx.handle, ctypes.byref(source), None if view is None else ctypes.byref(view),
        ctypes.byref(target)), ctx.handle)
    return _arrays.raw(out)


def _new_values(like, shape, code):
    if _arrays.kind_of(like) == "torch":
        return _arrays.empty_like_kind(like, shape, code)
    import numpy
    if code == _arrays.BF16:
        return _arrays.bf16(numpy.empty(shape, dtype=numpy.uint16))
    return numpy.empty(shape, dtype=numpy.float32 if code == _arrays.F32 else numpy.float16)
