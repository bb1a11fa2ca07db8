"""numpy arrays and torch CPU tensors as flashcpu_tensor views, without
copies, and outputs of the same kind."""

import ctypes
import operator
import struct

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


_KINDS = {}  # type -> "torch" / "numpy": a call's arrays are few types


def kind_of(x):
    """'torch' or 'numpy'."""
    kind = _KINDS.get(type(x))
    if kind is not None:
        return kind
    if isinstance(x, bf16):
        kind = "numpy"
    else:
        module = type(x).__module__
        if module.startswith("torch"):
            kind = "torch"
        elif module.startswith("numpy"):
            kind = "numpy"
        else:
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"expected a numpy array or a torch CPU tensor, got {type(x).__name__}")
    _KINDS[type(x)] = kind
    return kind


# dtype object -> flashcpu code of the float dtypes read as they are, per
# kind (numpy's dtype names are slow to build per call, and its dtypes
# compare equal to strings, so no mixing); None for other dtypes.
_TORCH_DTYPES, _NUMPY_DTYPES = {}, {}
_NUMPY_FLOATS = {"float32": F32, "float16": F16, "bfloat16": BF16}  # bfloat16: ml_dtypes


def torch_float_code(dtype):
    """F32, F16 or BF16 for a torch float dtype flashcpu reads, else None."""
    if dtype not in _TORCH_DTYPES:
        import torch
        _TORCH_DTYPES[dtype] = {torch.float32: F32, torch.float16: F16,
                                torch.bfloat16: BF16}.get(dtype)
    return _TORCH_DTYPES[dtype]


def numpy_float_code(dtype):
    """F32, F16 or BF16 for a numpy float dtype in this machine's byte
    order, else None."""
    if dtype not in _NUMPY_DTYPES:
        code = _NUMPY_FLOATS.get(dtype.name)
        _NUMPY_DTYPES[dtype] = code if code is not None and dtype.isnative else None
    return _NUMPY_DTYPES[dtype]


def dtype_of(x):
    """The flashcpu dtype of an array or tensor."""
    if isinstance(x, bf16):
        return BF16
    if kind_of(x) == "torch":
        code = torch_float_code(x.dtype)
    else:
        code = numpy_float_code(x.dtype)
        if code is None and x.dtype.name in _NUMPY_FLOATS:
            _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
                  f"dtype {x.dtype.str} is not in this machine's byte order")
    if code is None:
        _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
              f"dtype {x.dtype} is not one of float32, float16, bfloat16 (numpy: "
              "a uint16 array wrapped in flashcpu.bf16, or ml_dtypes.bfloat16)")
    return code


def float_code(dtype, what):
    """F32, F16 or BF16 for a dtype given as a numpy or torch float dtype or
    its name ("float32", "float16", "bfloat16")."""
    if isinstance(dtype, str):
        code = _NUMPY_FLOATS.get(dtype)
    elif type(dtype).__module__.startswith("torch"):
        code = torch_float_code(dtype)
    else:
        import numpy
        try:
            code = numpy_float_code(numpy.dtype(dtype))
        except TypeError:
            code = None
    if code is None:
        _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
              f"{what} is {dtype!r}; it must be float32, float16 or bfloat16")
    return code


def is_plain_float(x):
    """Whether x is a torch tensor or numpy array of a float dtype flashcpu
    reads as it is (not codes of a quantized format)."""
    kind = _KINDS.get(type(x))
    if kind == "torch":
        return torch_float_code(x.dtype) is not None
    return kind == "numpy" and not isinstance(x, bf16) and numpy_float_code(x.dtype) is not None


def raw(x):
    return x.array if isinstance(x, bf16) else x


def geometry(x):
    """(shape, strides in elements, address) of an array or tensor."""
    x = raw(x)
    if kind_of(x) == "torch":
        if not x.is_cpu:
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"tensors must be on the CPU, not {x.device}")
        return tuple(x.shape), tuple(x.stride()), x.data_ptr()
    size, byte_strides = x.itemsize, x.strides
    if x.size == 0:  # numpy gives empty arrays strides 0: any will do
        strides, step = [], 1
        for extent in reversed(x.shape):
            strides.insert(0, step)
            step *= max(extent, 1)
        return x.shape, tuple(strides), x.ctypes.data
    strides = tuple([s // size for s in byte_strides])
    if tuple([s * size for s in strides]) != byte_strides:
        _fail(errors.BadLayoutError, "BAD_LAYOUT",
              "array strides are not a multiple of the element size")
    return x.shape, strides, x.ctypes.data


_EMPTY = ctypes.c_double()  # a non-NULL address for arrays of no elements


def _address(shape, address):
    """address, or a harmless non-NULL one for an empty array (torch gives
    empty tensors address 0, which the library takes for a missing one)."""
    if address == 0 and any(extent == 0 for extent in shape):
        return ctypes.addressof(_EMPTY)
    return address


# flashcpu_tensor's bytes (data, dtype, dims[4], strides[4]) packed in one
# step: a Tensor built from bytes costs a fifth of one built from fields
# (0.4 against 2 us), and every call builds four.
_TENSOR_BYTES = struct.Struct("@Pi4q4q")
_PACKED = _TENSOR_BYTES.size == ctypes.sizeof(Tensor)  # else field by field


def _ordered(address, code, shape, strides, layout):
    """The flashcpu_tensor [B, S, H, D] of a 4-dim geometry in layout."""
    if not _PACKED:
        if layout == "bshd":
            return Tensor(address, code, tuple(shape), (strides[0], strides[1], strides[2], 1))
        return Tensor(address, code, (shape[0], shape[2], shape[1], shape[3]),
                      (strides[0], strides[2], strides[1], 1))
    if layout == "bshd":
        return Tensor.from_buffer_copy(_TENSOR_BYTES.pack(
            address, code, shape[0], shape[1], shape[2], shape[3],
            strides[0], strides[1], strides[2], 1))
    return Tensor.from_buffer_copy(_TENSOR_BYTES.pack(
        address, code, shape[0], shape[2], shape[1], shape[3],
        strides[0], strides[2], strides[1], 1))


def torch_view(x, layout):
    """view()'s common case in a few steps: a 4-dim torch CPU float tensor
    with its last dim contiguous and a non-NULL address; None for anything
    else (view() then says what is wrong)."""
    if _KINDS.get(type(x)) == "torch":
        code = _TORCH_DTYPES.get(x.dtype)
        if code is not None and x.is_cpu and x.dim() == 4:
            shape, strides, address = x.shape, x.stride(), x.data_ptr()
            if address and (strides[3] == 1 or shape[3] <= 1):
                return _ordered(address, code, shape, strides, layout)
    return None


def view(x, layout, what):
    """A flashcpu_tensor over x, [B, S, H, D] ("bshd") or [B, H, S, D]
    ("bhsd"), the last dim contiguous."""
    fast = torch_view(x, layout)
    if fast is not None:
        return fast
    shape, strides, address = geometry(x)
    if len(shape) != 4:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"{what} has {len(shape)} dims; expected 4 ({layout})")
    if shape[3] > 1 and strides[3] != 1:
        _fail(errors.BadLayoutError, "BAD_LAYOUT",
              f"{what}'s last dim (head_dim) must be contiguous (stride "
              f"{strides[3]}); make it so once, e.g. with .contiguous()")
    return _ordered(_address(shape, address), dtype_of(x), shape, strides, layout)


def rows_view(x, what):
    """A flashcpu_tensor [1, T, H, D] over packed rows x [T, H, D], the last
    dim contiguous."""
    shape, strides, address = geometry(x)
    if len(shape) != 3:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"{what} has {len(shape)} dims; expected 3 (packed rows [T, H, D])")
    if shape[2] > 1 and strides[2] != 1:
        _fail(errors.BadLayoutError, "BAD_LAYOUT",
              f"{what}'s last dim (head_dim) must be contiguous (stride "
              f"{strides[2]}); make it so once, e.g. with .contiguous()")
    t = Tensor(_address(shape, address), dtype_of(x))
    t.dims[0], t.strides[0] = 1, 0
    for i in range(3):
        t.dims[i + 1] = shape[i]
        t.strides[i + 1] = strides[i]
    t.strides[3] = 1
    return t


def empty_like_kind(like, shape, dtype_code):
    """A new array or tensor of like's kind."""
    if kind_of(like) == "torch":
        import torch
        return torch.empty(shape, dtype=(torch.float32, torch.float16, torch.bfloat16)[dtype_code])
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
    """A ctypes int64 array of an integer array, tensor or sequence (a small
    copy); floats, bools and values outside int64 are refused."""
    items = index_array(values, what, bits=64).tolist()
    return (ctypes.c_int64 * len(items))(*items), len(items)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MAX = (1 << 31) - 1


def integer(value, what, low=INT64_MIN, high=INT64_MAX):
    """value as a Python int in [low, high]: an int or anything with
    __index__ (numpy integers), never a float, a bool or a string."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} {_short(value)}: expected an integer")
    if not low <= number <= high:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} {_short(number)} is outside [{low}, {high}]")
    return number


def _short(value):
    """repr(value), cut to 40 characters for a message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def float32(value, what, zero_means):
    """value as a float that float32 holds without turning it into 0, which
    the C API reads as zero_means (inf and NaN pass: the library refuses
    them with its own message)."""
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} {_short(value)}: expected a number")
    if number != 0.0 and ctypes.c_float(number).value == 0.0:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} {number!r} rounds to 0 in float32, which means {zero_means}")
    return number


def _numpy_of(values, what):
    """values (a numpy array, a torch CPU tensor, a flashcpu.bf16 or a
    sequence) as a numpy array, without a copy where it can."""
    if isinstance(values, bf16):
        return values.array
    module = type(values).__module__
    if module.startswith("torch"):
        if values.device.type != "cpu":
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"{what} must be on the CPU, not {values.device}")
        return values.detach().numpy()
    import numpy
    try:
        return numpy.asarray(values)
    except (TypeError, ValueError):
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} must be an array, a tensor or a sequence of numbers")


def index_array(values, what, bits=32, ndim=1):
    """A C-contiguous numpy int32 (or int64) array of an integer array,
    tensor or sequence: in place when it is one already, else a copy (the
    index arrays of a step are small). Values must fit."""
    import numpy
    array = _numpy_of(values, what)
    if array.size == 0 and array.dtype.kind not in "iu":
        array = array.astype(numpy.int64)
    if array.dtype.kind not in "iu":
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} must hold integers that fit int64, not {array.dtype}")
    if array.ndim != ndim:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH",
              f"{what} has {array.ndim} dims; expected {ndim}")
    target = numpy.int32 if bits == 32 else numpy.int64
    if array.dtype != target and array.size:
        info = numpy.iinfo(target)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"{what} holds {low if low < info.min else high}, outside int{bits}")
    return numpy.ascontiguousarray(array, dtype=target)


def small_vector(values, what, check_shape, dtypes=(F32,)):
    """(address, dtype code, the array kept) of a small array (sinks, ALiBi
    slopes) whose last dim is contiguous: in place when it is one already,
    in one of dtypes, else a float32 copy. check_shape(shape) returns an
    error text or None."""
    import numpy
    if kind_of_or_none(values) == "torch":
        import torch
        x = values.detach()
        if x.device.type != "cpu":
            _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
                  f"{what} must be on the CPU, not {x.device}")
        if torch_float_code(x.dtype) not in dtypes:
            if x.dtype.is_complex:
                _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
                      f"{what} must hold real numbers, not {x.dtype}")
            x = x.to(torch.float32)
        problem = check_shape(tuple(x.shape))
        if problem:
            _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH", f"{what}: {problem}")
        if x.dim() and x.shape[-1] > 1 and x.stride(-1) != 1:
            x = x.contiguous()
        return x.data_ptr() or ctypes.addressof(_EMPTY), torch_float_code(x.dtype), x
    if isinstance(values, bf16):
        array, code = values.array, BF16
    else:
        array = _numpy_of(values, what)
        code = numpy_float_code(array.dtype)  # None: a native float32 copy below
    if code not in dtypes:
        if code == BF16 and isinstance(values, bf16):
            array = (array.astype(numpy.uint32) << 16).view(numpy.float32)
        elif code is None and array.dtype.kind not in "fiub":
            _fail(errors.UnsupportedDtypeError, "UNSUPPORTED_DTYPE",
                  f"{what} must hold real numbers, not {array.dtype}")
        array, code = array.astype(numpy.float32), F32
    problem = check_shape(tuple(array.shape))
    if problem:
        _fail(errors.ShapeMismatchError, "SHAPE_MISMATCH", f"{what}: {problem}")
    if any(s < 0 or s % array.itemsize for s in array.strides) or (
            array.ndim and array.shape[-1] > 1 and array.strides[-1] != array.itemsize):
        array = numpy.ascontiguousarray(array)
    return array.ctypes.data, code, array


def kind_of_or_none(x):
    """'torch', 'numpy', or None for anything else (a list)."""
    module = type(x).__module__
    if module.startswith("torch"):
        return "torch"
    if isinstance(x, bf16) or module.startswith("numpy"):
        return "numpy"
    return None


def row_stride(x):
    """The stride in elements of dim 0 of a 2-dim array or tensor."""
    if kind_of_or_none(x) == "torch":
        return x.stride(0)
    return x.strides[0] // x.itemsize


def contiguous(x):
    """A C-contiguous copy of x (or x) of the same kind."""
    if kind_of_or_none(x) == "torch":
        return x.contiguous()
    import numpy
    return numpy.ascontiguousarray(x)


def check_writable(x, what):
    """Refuses a read-only numpy array (a broadcast view, a constant) as a
    destination."""
    x = raw(x)
    if kind_of(x) == "numpy" and not x.flags.writeable:
        _fail(errors.InvalidArgumentError, "INVALID_ARGUMENT",
              f"{what} is a read-only array")
