"""numpy arrays and torch CPU tensors as flashcpu_tensor views, without
copies, and outputs of the same kind."""

import ctypes

from . import errors
from ._library import Tensor

F32, F16, BF16 = 0, 1, 2
NAMES = {F32: "f32", F16: "f16", BF16: "bf16"}


class bf16:  # noqa: N801 (reads as a dtype tag)
    """Marks a numpy uint16 array as holding bfloat16 bits (numpy has no
    bfloat16): flashcpu.attention(flashcpu.bf16(q), ...). Outputs for such
    inputs come back as uint16 arrays of bfloat16 bits."""

    def __init__(self, array):
        import numpy
        if not isinstance(array, numpy.ndarray) or array.dtype != numpy.uint16:
            raise errors.UnsupportedDtypeError(
                "UNSUPPORTED_DTYPE", "flashcpu.bf16() takes a numpy uint16 array")
        self.array = array


def _fail(cls, status, message):
    raise cls(status, message)


def kind_of(x):
    """'torch' or 'numpy'."""
    if isinstance(x, bf16):
        return "numpy"
    module = type(x).__module__
    if module.startswith("torch"):
        return "torch"
    if module.startswith("numpy"):
        return "numpy"
    _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
          f"expected a numpy array or a torch CPU tensor, got {type(x).__name__}")


def dtype_of(x):
    """The flashcpu dtype of an array or tensor."""
    if isinstance(x, bf16):
        return BF16
    if kind_of(x) == "torch":
        import torch
        table = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}
        if x.dtype in table:
            return table[x.dtype]
    else:
        name = x.dtype.name
        table = {"float32": F32, "float16": F16, "bfloat16": BF16}  # ml_dtypes
        if name in table:
            return table[name]
    _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
          f"dtype {x.dtype} is not one of float32, float16, bfloat16 (numpy: "
          "a uint16 array wrapped in flashcpu.bf16, or ml_dtypes.bfloat16)")


def raw(x):
    return x.array if isinstance(x, bf16) else x


def geometry(x):
    """(shape, strides in elements, address) of an array or tensor."""
    x = raw(x)
    if kind_of(x) == "torch":
        if x.device.type != "cpu":
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"tensors must be on the CPU, not {x.device}")
        return tuple(x.shape), tuple(x.stride()), x.data_ptr()
    size = x.itemsize
    if any(s % size for s in x.strides):
        _fail(errors.BadLayoutError, "BAD_LAYOUT",
              "array strides are not a multiple of the element size")
    return x.shape, tuple(s // size for s in x.strides), x.ctypes.data


def view(x, layout, what):
    """A flashcpu_tensor over x, [B, S, H, D] ("bshd") or [B, H, S, D]
    ("bhsd"), the last dim contiguous."""
    shape, strides, address = geometry(x)
    if len(shape) != 4:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"{what} has {len(shape)} dims; expected 4 ({layout})")
    if shape[3] > 1 and strides[3] != 1:
        _fail(errors.BadLayoutError, "BAD_LAYOUT",
              f"{what}'s last dim (head_dim) must be contiguous (stride "
              f"{strides[3]}); make it so once, e.g. with .contiguous()")
    order = (0, 1, 2, 3) if layout == "bshd" else (0, 2, 1, 3)
    t = Tensor(address, dtype_of(x))
    for i, axis in enumerate(order):
        t.dims[i] = shape[axis]
        t.strides[i] = strides[axis]
    t.strides[3] = 1
    return t


def empty_like_kind(like, shape, dtype_code):
    """A new array or tensor of like's kind."""
    if kind_of(like) == "torch":
        import torch
        table = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16}
        return torch.empty(shape, dtype=table[dtype_code])
    import numpy
    if dtype_code == BF16:
        if isinstance(like, bf16):
            return bf16(numpy.empty(shape, dtype=numpy.uint16))
        return numpy.empty(shape, dtype=raw(like).dtype)  # ml_dtypes.bfloat16
    return numpy.empty(shape, dtype=numpy.float32 if dtype_code == F32 else numpy.float16)


def float32_pointer(x, what):
    """Address of a float32, C-contiguous array or tensor."""
    shape, strides, address = geometry(x)
    expected, step = [], 1
    for extent in reversed(shape):
        expected.insert(0, step)
        step *= extent
    if dtype_of(x) != F32 or (tuple(strides) != tuple(expected) and
                              any(e > 1 for e in shape)):
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} must be a contiguous float32 array or tensor")
    return address


def int64_array(values, what):
    """A ctypes int64 array of a sequence of integers (a small copy)."""
    try:
        items = [int(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
    except (TypeError, ValueError):
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} must be a sequence of integers")
    return (ctypes.c_int64 * len(items))(*items), len(items)
