"""The transformers backend's common call in as few Python steps as it can
be made: torch CPU tensors q, k, v [B, H, seq, D] of one float dtype, no
arrays among the options, the default context.

Inside a model's generate() the Python around a decode call runs with its
caches cold (the model's weights stream through them between calls), so
each step costs several microseconds there. With the compiled extension
one C++ call reads the views, makes the output and calls the library; the
params and their address are made once per option set
(_api.plain_params_address). Without it the four views go into one
preallocated buffer with one struct call and the library is called on
plain addresses."""

import ctypes
import struct
import sys

from . import _api, _arrays, _context, native
from ._library import Tensor

_lib = None  # set by __init__: flashcpu_attention taking 7 untyped pointers

# Four flashcpu_tensor structs (q, k, v, out) in one pack.
_FOUR = struct.Struct("@" + "Pi4q4q" * 4)
_STEP = ctypes.sizeof(Tensor)
_USABLE = _FOUR.size == 4 * _STEP
_packs = []  # free (buffer, address): one taken per call in flight


def _take_pack():
    try:
        return _packs.pop()
    except IndexError:
        buffer = ctypes.create_string_buffer(_FOUR.size)
        return buffer, ctypes.addressof(buffer)


def run_packed(handle, address, params_address):
    """flashcpu_attention on the four views packed at address; raises on a
    non-zero status (a separate function so that tools can time it)."""
    status = _lib(handle, address, address + _STEP, address + 2 * _STEP,
                  address + 3 * _STEP, None, params_address)
    if status:
        _context.check(status, handle)


def attention(q, k, v, causal, window, softcap, scale):
    """out [B, L, H, Dv] of q's dtype, or None where the tensors or options
    are anything else (the caller then takes flashcpu.attention, which says
    what is wrong). causal a bool, window a tuple, softcap a float."""
    dtype = q.dtype
    if k.dtype is not dtype or v.dtype is not dtype:
        return None
    compiled = native._module
    if compiled is None:  # not looked for yet
        compiled = native.available()
    if compiled:  # it checks the tensors and makes out itself: one step
        shared = _api._plain.get((causal, window, softcap, scale))
        if shared is None:
            shared = _api.plain_params_address(causal, window, softcap, scale)
            if shared is None:
                return None
        handle = _context.default_context().handle
        status, out = compiled.attention_new(q, k, v, handle.value, shared[1])
        if status == 0:
            return out
        if status > 0:
            _context.check(status, handle)
        # -1: not tensors the compiled path takes; the ctypes path looks.
    code = _arrays.torch_float_code(dtype)
    if code is None or not _USABLE or not (q.is_cpu and k.is_cpu and v.is_cpu):
        return None
    try:
        batch, heads, rows, dim = q.shape
        k_batch, kv_heads, keys, k_dim = k.shape
        v_batch, v_heads, v_keys, dv = v.shape
    except ValueError:
        return None
    qs, ks, vs = q.stride(), k.stride(), v.stride()
    q_at, k_at, v_at = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if qs[3] != 1 or ks[3] != 1 or vs[3] != 1 or not (q_at and k_at and v_at):
        return None
    shared = _api.plain_params_address(causal, window, softcap, scale)
    if shared is None:
        return None
    params_at = shared[1]  # shared holds the params while the call runs
    # The sizes as separate arguments: 3-4 us less than a tuple there.
    out = sys.modules["torch"].empty(batch, rows, heads, dv, dtype=dtype)
    o_at = out.data_ptr()
    if not o_at:
        return None
    buffer, address = pack = _take_pack()
    try:
        _FOUR.pack_into(
            buffer, 0,
            q_at, code, batch, rows, heads, dim, qs[0], qs[2], qs[1], 1,
            k_at, code, k_batch, keys, kv_heads, k_dim, ks[0], ks[2], ks[1], 1,
            v_at, code, v_batch, v_keys, v_heads, dv, vs[0], vs[2], vs[1], 1,
            o_at, code, batch, rows, heads, dv, rows * heads * dv, heads * dv, dv, 1)
        run_packed(_context.default_context().handle, address, params_at)
    finally:
        _packs.append(pack)
    return out


def _geometry(x, written):
    """(code, shape, strides, address) of a 4-dim torch CPU tensor or numpy
    array (writable where written) of a float dtype read as it is, its last
    dim contiguous and its address not NULL; None for anything else."""
    kind = _arrays._KINDS.get(type(x))
    if kind == "torch":
        code = _arrays.torch_float_code(x.dtype)
        if code is None or not x.is_cpu:
            return None
        shape, strides, address = x.shape, x.stride(), x.data_ptr()
    elif kind == "numpy" and type(x) is not _arrays.bf16:
        code = _arrays.numpy_float_code(x.dtype)
        if code is None or (written and not x.flags.writeable):
            return None
        size = x.itemsize
        shape, address = x.shape, x.__array_interface__["data"][0]
        strides = [s // size for s in x.strides]
        if any(s % size for s in x.strides):
            return None
    else:
        return None
    if len(shape) != 4 or not address or (strides[3] != 1 and shape[3] > 1):
        return None
    return code, shape, strides, address


def both_torch(q, v):
    """q and v are 4-dim torch tensors (the output can be made from them)."""
    kinds = _arrays._KINDS
    return kinds.get(type(q)) == "torch" and kinds.get(type(v)) == "torch" and \
        q.dim() == 4 and v.dim() == 4


def new_output(q, v):
    """An output for q and v in either layout: q's sizes but the last, v's
    head_dim, q's dtype."""
    return sys.modules["torch"].empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]),
                                      dtype=q.dtype)


def attention_into(q, k, v, out, layout, causal, window, softcap, scale, ctx):
    """flashcpu.attention's common call (no arrays among the options, out
    given, no lse) in few Python steps: True when it ran, False where
    anything is out of the ordinary (the caller then takes the general
    path, which says what is wrong). The library checks every argument as
    on any call."""
    if layout not in ("bshd", "bhsd"):
        return False
    compiled = native._module
    if compiled is None:  # not looked for yet
        compiled = native.available()
    if compiled and _arrays._KINDS.get(type(q)) == "torch":
        shared = _api.plain_params_address(causal, window, softcap, scale)
        if shared is None:
            return False
        handle = ctx.handle
        bhsd = layout == "bhsd"
        status = compiled.attention_into(q, k, v, out, bhsd, bhsd, handle.value, shared[1])
        if status == 0:
            return True
        if status > 0:
            _context.check(status, handle)
        # -1: not tensors the compiled path takes; the ctypes path looks.
    if not _USABLE:
        return False
    views = [_geometry(q, False), _geometry(k, False), _geometry(v, False),
             _geometry(out, True)]
    if None in views:
        return False
    shared = _api.plain_params_address(causal, window, softcap, scale)
    if shared is None:
        return False
    fields = []
    for code, shape, strides, address in views:
        if layout == "bshd":
            fields += (address, code, shape[0], shape[1], shape[2], shape[3],
                       strides[0], strides[1], strides[2], 1)
        else:
            fields += (address, code, shape[0], shape[2], shape[1], shape[3],
                       strides[0], strides[2], strides[1], 1)
    buffer, address = pack = _take_pack()
    try:
        _FOUR.pack_into(buffer, 0, *fields)
        run_packed(ctx.handle, address, shared[1])
    finally:
        _packs.append(pack)
    return True
