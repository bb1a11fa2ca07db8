"""torch.ops.flashcpu.attention, attention_paged and kv_append: flashcpu's
functions as torch operators, with fake (meta) implementations so that
torch.compile and torch.export trace models that call them. Imported by
`import flashcpu.torch_ops` (needs torch 2.4 or later).

They are defined with torch.library.Library (schema, CPU kernel, fake)
rather than torch.library.custom_op, whose checks around each call cost
more than the call itself on a short decode."""

import torch

from . import _api, _paged, errors

if not hasattr(torch.library, "register_fake"):
    raise ImportError("flashcpu.torch_ops needs torch 2.4 or later (torch.library.register_fake); "
                      f"this is torch {torch.__version__}")

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


for _name, _kernel, _fake in (("attention", _attention, _attention_fake),
                              ("attention_paged", _attention_paged, _attention_paged_fake),
                              ("kv_append", _kv_append, _kv_append_fake)):
    _lib.impl(_name, _kernel, "CPU")
    torch.library.register_fake(f"flashcpu::{_name}", _fake, lib=_lib)

attention = torch.ops.flashcpu.attention
attention_paged = torch.ops.flashcpu.attention_paged
kv_append = torch.ops.flashcpu.kv_append
