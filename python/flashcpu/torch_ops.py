"""torch.ops.flashcpu.attention, attention_paged and kv_append: flashcpu's
functions as torch custom ops, with fake (meta) implementations so that
torch.compile and torch.export trace models that call them. Imported by
`import flashcpu.torch_ops` (needs torch 2.4 or later)."""

from typing import Optional

import torch

from . import _api, _paged, errors

if not hasattr(torch.library, "custom_op"):
    raise ImportError("flashcpu.torch_ops needs torch 2.4 or later (torch.library.custom_op); "
                      f"this is torch {torch.__version__}")


@torch.library.custom_op("flashcpu::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
              scale: Optional[float] = None, layout: str = "bshd",
              sinks: Optional[torch.Tensor] = None,
              alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """flashcpu.attention on CPU tensors; see its documentation."""
    if sinks is None and alibi_slopes is None:  # flashcpu.attention's fast path
        shape = list(q.shape)
        shape[3] = v.shape[3]
        return _api.attention(q, k, v, causal=causal, window=(window_left, window_right),
                              softcap=softcap, scale=scale, layout=layout,
                              out=q.new_empty(shape))
    return _api.attention(q, k, v, causal=causal, window=(window_left, window_right),
                          softcap=softcap, scale=scale, layout=layout, sinks=sinks,
                          alibi_slopes=alibi_slopes)


@attention.register_fake
def _attention_fake(q, k, v, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                    scale=None, layout="bshd", sinks=None, alibi_slopes=None):
    shape = list(q.shape)
    shape[3] = v.shape[3]
    return q.new_empty(shape)


@torch.library.custom_op("flashcpu::attention_paged", mutates_args=())
def attention_paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    plan: torch.Tensor, layout: str = "nhd", causal: bool = False,
                    window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                    scale: Optional[float] = None, sinks: Optional[torch.Tensor] = None,
                    alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
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


@attention_paged.register_fake
def _attention_paged_fake(q, k_cache, v_cache, plan, layout="nhd", causal=False,
                          window_left=-1, window_right=-1, softcap=0.0, scale=None,
                          sinks=None, alibi_slopes=None):
    dv = v_cache.shape[3]
    return q.new_empty((q.shape[0], q.shape[1], dv))


@torch.library.custom_op("flashcpu::kv_append", mutates_args=("k_cache", "v_cache"))
def kv_append(k_new: torch.Tensor, v_new: torch.Tensor, slot_mapping: torch.Tensor,
              k_cache: torch.Tensor, v_cache: torch.Tensor, layout: str = "nhd") -> None:
    """flashcpu.kv_append on CPU tensors: writes k_new [T, Hkv, D] and v_new
    [T, Hkv, Dv] into the caches' slots (slot_mapping int64 [T], -1
    skips), in place."""
    _paged.kv_append(k_new, v_new, slot_mapping, _paged.PagedKV(k_cache, v_cache, layout))


@kv_append.register_fake
def _kv_append_fake(k_new, v_new, slot_mapping, k_cache, v_cache, layout="nhd"):
    return None
