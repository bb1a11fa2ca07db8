"""torch.ops.flashcpu.attention, attention_paged and kv_append: flashcpu's
functions as torch operators, with fake (meta) implementations so that
torch.compile and torch.export trace models that call them. Imported by
`import flashcpu.torch_ops` (torch 1.13 or later; torch.compile needs 2.4
or later, whose torch.library.register_fake registers the fakes: before,
they are the Meta kernels).

They are defined with torch.library.Library (schema, CPU kernel, fake)
rather than torch.library.custom_op, whose checks around each call cost
more than the call itself on a short decode. Where flashcpu.native is
built, their CPU kernels are the extension's C++ ones (use_native): the
dispatcher then calls the library with no Python frame between, and the
C++ kernels hand what they do not take to the Python kernels here."""

import ctypes

import torch

from . import _api, _paged, errors, native
from ._library import PagedKV

_OPTIONS = ("bool causal=False, int window_left=-1, int window_right=-1, float softcap=0.0, "
            "float? scale=None")
_lib = torch.library.Library("flashcpu", "DEF")
_lib.define(f"attention(Tensor q, Tensor k, Tensor v, {_OPTIONS}, str layout=\"bshd\", "
            "Tensor? sinks=None, Tensor? alibi_slopes=None) -> Tensor")
_lib.define("attention_paged(Tensor q, Tensor k_cache, Tensor v_cache, Tensor plan, "
            f"str layout=\"nhd\", {_OPTIONS}, Tensor? sinks=None, "
            "Tensor? alibi_slopes=None) -> Tensor")
_lib.define("kv_append(Tensor k_new, Tensor v_new, Tensor slot_mapping, Tensor(a!) k_cache, "
            "Tensor(b!) v_cache, str layout=\"nhd\") -> ()")


def _attention(q, k, v, causal=False, window_left=-1, window_right=-1, softcap=0.0,
               scale=None, layout="bshd", sinks=None, alibi_slopes=None):
    """flashcpu.attention on CPU tensors; see its documentation."""
    return _api.attention(q, k, v, causal=causal, window=(window_left, window_right),
                          softcap=softcap, scale=scale, layout=layout, sinks=sinks,
                          alibi_slopes=alibi_slopes)


def _attention_fake(q, k, v, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                    scale=None, layout="bshd", sinks=None, alibi_slopes=None):
    shape = list(q.shape)
    shape[3] = v.shape[3]
    return q.new_empty(shape)


def _attention_paged(q, k_cache, v_cache, plan, layout="nhd", causal=False, window_left=-1,
                     window_right=-1, softcap=0.0, scale=None, sinks=None, alibi_slopes=None):
    """flashcpu.attention_paged on CPU tensors: q [T, Hq, D] packed rows,
    the caches as flashcpu.PagedKV takes them, and the step's flashcpu.Plan
    as plan.as_tensor() gives it (made once per step, outside the model;
    the op checks no index arrays). Returns out [T, Hq, Dv] of q's dtype."""
    if q.dim() != 3:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"q has {q.dim()} dims; expected 3 (packed rows [T, Hq, D])")
    kv = _paged.PagedKV(k_cache, v_cache, layout)
    out = q.new_empty((q.shape[0], q.shape[1], kv.v_head_dim))
    return _paged.attention_paged(q, kv, _paged.plan_of_tensor(plan), causal=causal,
                                  window=(window_left, window_right), softcap=softcap,
                                  scale=scale, sinks=sinks, alibi_slopes=alibi_slopes,
                                  out=out)


def _attention_paged_fake(q, k_cache, v_cache, plan, layout="nhd", causal=False,
                          window_left=-1, window_right=-1, softcap=0.0, scale=None,
                          sinks=None, alibi_slopes=None):
    return q.new_empty((q.shape[0], q.shape[1], v_cache.shape[3]))


def _kv_append(k_new, v_new, slot_mapping, k_cache, v_cache, layout="nhd"):
    """flashcpu.kv_append on CPU tensors: writes k_new [T, Hkv, D] and v_new
    [T, Hkv, Dv] into the caches' slots (slot_mapping int64 [T], -1
    skips), in place."""
    _paged.kv_append(k_new, v_new, slot_mapping, _paged.PagedKV(k_cache, v_cache, layout))


def _kv_append_fake(k_new, v_new, slot_mapping, k_cache, v_cache, layout="nhd"):
    return None


# The CPU kernels: use_native or use_python, below.
_KERNELS = (("attention", _attention), ("attention_paged", _attention_paged),
            ("kv_append", _kv_append))
for _name, _fake in (("attention", _attention_fake),
                     ("attention_paged", _attention_paged_fake),
                     ("kv_append", _kv_append_fake)):
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake(f"flashcpu::{_name}", _fake, lib=_lib)
    else:  # before torch 2.4: the fake is the Meta kernel
        _lib.impl(_name, _fake, "Meta")

_python_kernels = None  # the Library of the Python CPU kernels while they serve
_native_module = None  # the extension whose C++ kernel serves instead


def _plan_handles(plan_id, q_code, out_code, k_dtype, v_dtype):
    """(the Plan as_tensor() named, its C plan for these dtypes on
    unquantized caches, its context handle) for the C++ attention_paged
    kernel, or None where the Python kernel is to take the call (the plan
    is gone or closed, or has no C plan for these dtypes yet: the Python
    kernel makes it)."""
    plan = _paged._live_plans.get(plan_id)
    if plan is None or plan._handle is None or plan.context._ctx is None:
        return None
    handle = plan._handles.get((q_code, out_code, (k_dtype, v_dtype, None, None)))
    if handle is None:
        return None
    return plan, handle.value, plan.context._ctx.value


def use_native(module):
    """Makes the loaded flashcpu.native extension's C++ kernels serve the
    ops on CPU (flashcpu.native does it when it loads).
    Not while another thread calls the ops."""
    global _python_kernels, _native_module
    if _native_module is module:
        return
    if _native_module is not None:
        _native_module.deregister_ops()
        _native_module = None
    lib, _python_kernels = _python_kernels, None
    if lib is not None:  # one CPU kernel at a time: torch warns on an override
        getattr(lib, "_destroy", lambda: None)()  # torch 2.x; before, dropping it does
        del lib
    module.register_ops(ctypes.sizeof(PagedKV), _attention, _kv_append, _attention_paged,
                        _plan_handles)
    _native_module = module


def use_python():
    """Makes the Python kernels serve the ops on CPU (the
    path without the extension; the results are the same). Not while
    another thread calls the ops."""
    global _python_kernels, _native_module
    if _native_module is not None:
        _native_module.deregister_ops()
        _native_module = None
    if _python_kernels is None:
        lib = torch.library.Library("flashcpu", "IMPL")
        for name, kernel in _KERNELS:
            lib.impl(name, kernel, "CPU")
        _python_kernels = lib


def compiled():
    """True where the ops' CPU kernels are the extension's C++ ones."""
    return _native_module is not None


_module = native.available()  # loading it registers the C++ kernel too
if _module:
    use_native(_module)
else:
    use_python()

attention = torch.ops.flashcpu.attention
attention_paged = torch.ops.flashcpu.attention_paged
kv_append = torch.ops.flashcpu.kv_append
