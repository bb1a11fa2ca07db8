"""torch.ops.flashcpu.attention: flashcpu.attention as a torch custom op,
with a fake (meta) implementation so that torch.compile and torch.export
trace models that call it. Imported by `import flashcpu.torch_ops` (needs
torch 2.4 or later)."""

from typing import Optional

import torch

from . import _api


@torch.library.custom_op("flashcpu::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
              scale: Optional[float] = None, layout: str = "bshd") -> torch.Tensor:
    """flashcpu.attention on CPU tensors; see its documentation."""
    return _api.attention(q, k, v, causal=causal, window=(window_left, window_right),
                          softcap=softcap, scale=scale, layout=layout)


@attention.register_fake
def _attention_fake(q, k, v, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                    scale=None, layout="bshd"):
    shape = list(q.shape)
    shape[3] = v.shape[3]
    return q.new_empty(shape)
