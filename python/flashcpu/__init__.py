"""flashcpu: exact attention (FlashAttention) on multicore CPUs.

    import flashcpu
    out = flashcpu.attention(q, k, v, causal=True)   # numpy or torch CPU
    print(flashcpu.info())

See docs/python.md for the arguments, dtypes, layouts and errors.
"""

from . import _api, _context, _library
from ._api import attention, info, merge_states
from ._arrays import bf16
from ._context import Context
from .errors import (BadLayoutError, Error, InternalError, InvalidArgumentError,
                     NullPointerError, OutOfMemoryError, OverlapError,
                     ShapeMismatchError, SizeOverflowError, UnsupportedDtypeError,
                     UnsupportedError)

_lib, _library.loaded_path = _library.load()
_api._lib = _context._lib = _lib
__version__ = _lib.flashcpu_version_string().decode()

__all__ = ["attention", "merge_states", "info", "Context", "bf16", "Error",
           "BadLayoutError", "InternalError", "InvalidArgumentError", "NullPointerError",
           "OutOfMemoryError", "OverlapError", "ShapeMismatchError", "SizeOverflowError",
           "UnsupportedDtypeError", "UnsupportedError"]
