"""flashcpu: exact attention (FlashAttention) on multicore CPUs.

    import flashcpu
    out = flashcpu.attention(q, k, v, causal=True)   # numpy or torch CPU
    print(flashcpu.info())

    # an engine's step over paged KV caches, ragged batches
    cache = flashcpu.PagedKV(k_cache, v_cache, layout="nhd")
    flashcpu.kv_append(k_new, v_new, slot_mapping, cache)
    with flashcpu.Plan(cu_seqlens_q, seq_lens_kv, block_table,
                       num_heads=32, kv=cache) as plan:
        out = flashcpu.attention_paged(q, cache, plan, causal=True)

    # quantized K/V: int8 codes with a scale per token and head
    kq = flashcpu.quantize(k, "i8")
    out = flashcpu.attention(q, kq, flashcpu.quantize(v, "i8"), causal=True)

See docs/python.md for the arguments, dtypes, layouts and errors.
"""

from . import _api, _context, _library, _model_call, _paged, _quantized
from ._api import attention, info, merge_states
from ._quantized import Quantized, dequantize, quantize
from ._paged import PagedKV, Plan, attention_paged, kv_append
from ._arrays import bf16
from ._context import Context
from .errors import (BadLayoutError, Error, InternalError, InvalidArgumentError,
                     NullPointerError, OutOfMemoryError, OverlapError,
                     ShapeMismatchError, SizeOverflowError, UnsupportedDtypeError,
                     UnsupportedError)

_lib, _library.loaded_path = _library.load()
_api._lib = _context._lib = _paged._lib = _quantized._lib = _lib
_model_call._lib = _library.untyped_attention(_lib)
__version__ = _lib.flashcpu_version_string().decode()

__all__ = ["attention", "merge_states", "info", "Context", "bf16", "PagedKV", "Plan",
           "attention_paged", "kv_append", "Quantized", "quantize", "dequantize", "Error",
           "BadLayoutError", "InternalError", "InvalidArgumentError", "NullPointerError",
           "OutOfMemoryError", "OverlapError", "ShapeMismatchError", "SizeOverflowError",
           "UnsupportedDtypeError", "UnsupportedError"]
