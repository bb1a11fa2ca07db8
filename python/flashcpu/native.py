"""The compiled fast path for torch tensors: a small C++ extension that
flashcpu.attention(..., out=...) (and the transformers backend through it),
flashcpu.attention_paged(..., out=...), flashcpu.kv_append and their torch
ops call instead of ctypes, so that a call costs about what the C call
costs.

    import flashcpu.native
    flashcpu.native.build()      # once: compiles against the installed torch

The package stays pure Python: the extension is built only when asked, by
torch.utils.cpp_extension (it needs a C++ compiler, ninja and torch's
headers; Debian: g++, ninja-build and libtorch-dev), into a folder per
torch and source version under FLASHCPU_NATIVE_DIR (default
~/.cache/flashcpu/native). Once built it loads on first use in any process
with the same torch; FLASHCPU_NATIVE=0 turns it off. Without it every call
takes the ctypes path, with the same results: both call the same library
function on the same views.

Loaded, it also serves the torch ops (torch.ops.flashcpu.*) on CPU
tensors: their kernels are registered in C++ (flashcpu.torch_ops.use_native),
so that the dispatcher calls the library with no Python frame in between."""

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import sys

from . import _api, _context
from ._library import FLAG_CAUSAL, AttentionParams

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_HERE, "_native_attention.cpp")
# Every file the build reads (the source includes the headers): the build
# folder's name hashes them all.
_FILES = (SOURCE,) + tuple(os.path.join(_HERE, name) for name in (
    "_native_package.h", "_native_backend.h", "_native_op.h"))
_module = None  # the loaded extension; False once loading failed or is off


def _folder():
    """The build folder for this torch and this source."""
    import torch
    digest = hashlib.sha256()
    for path in _FILES:
        with open(path, "rb") as source:
            digest.update(source.read())
    digest = digest.hexdigest()[:12]
    tag = f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}"
    root = os.environ.get("FLASHCPU_NATIVE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "flashcpu", "native")
    return os.path.join(root, tag.replace("+", "_"))


def _name():
    return "flashcpu_native_attention"


def _attach(module):
    """Gives the module the library functions' addresses; returns it."""
    global _module
    module.set_functions(*(ctypes.cast(_api._lib[name], ctypes.c_void_p).value
                           for name in ("flashcpu_attention", "flashcpu_attention_paged",
                                        "flashcpu_kv_append")))
    offsets = [getattr(AttentionParams, field).offset
               for field in ("scale", "flags", "window_left", "window_right", "softcap",
                             "sinks", "sinks_dtype")]
    module.set_package(bytes(_api.new_params()), offsets, FLAG_CAUSAL, _context.default_address)
    hook = module.bump_context_generation
    if hook not in _context.change_hooks:
        _context.change_hooks.append(hook)
    _module = module
    ops = sys.modules.get("flashcpu.torch_ops")
    if ops is not None:  # defined already: its CPU kernel moves to C++ now
        ops.use_native(module)
    return module


def loaded():
    """The loaded extension (looking for a built one on the first call),
    or None."""
    return (_module or None) if _module is not None else available()


def build(verbose=False):
    """Compiles the extension against the installed torch (tens of seconds
    the first time) and loads it. Raises what torch.utils.cpp_extension
    raises where it cannot (no compiler, ninja or torch headers)."""
    from torch.utils import cpp_extension
    folder = _folder()
    os.makedirs(folder, exist_ok=True)
    module = cpp_extension.load(name=_name(), sources=[SOURCE], build_directory=folder,
                                extra_cflags=["-O2"], verbose=verbose)
    return _attach(module)


def _built_path():
    """The newest build in the folder, or None. torch.utils.cpp_extension
    names a second build of the same name in one process NAME_v1 and so on
    (the module's name is the file's)."""
    folder = _folder()
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES) + (".so",)
    found = [os.path.join(folder, n) for n in names
             if n.startswith(_name()) and n.endswith(suffixes)]
    return max(found, key=os.path.getmtime) if found else None


def available():
    """The loaded extension, loading a built one on first use; None where it
    is not built, torch is not imported, or FLASHCPU_NATIVE=0."""
    global _module
    if _module is not None:
        return _module or None
    _module = False
    if os.environ.get("FLASHCPU_NATIVE", "1") == "0" or "torch" not in sys.modules:
        return None
    try:
        path = _built_path()
        if path is None:
            return None
        spec = importlib.util.spec_from_file_location(
            os.path.basename(path).split(".")[0], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return _attach(module)
    except (ImportError, OSError):
        return None


def reset():
    """Forgets the loaded extension (tests: the next call looks again)."""
    global _module
    _module = None
