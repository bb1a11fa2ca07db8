"""flashcpu.Context, the default context of each Python thread, and the
host OpenMP runtime torch brings."""

import ctypes
import os
import re
import sys
import threading

from . import _arrays, errors
from ._library import ContextOptions, HostOpenmp, ISAS, TEAM_LEVELS

_lib = None  # set by __init__


def check(status, ctx):
    """Raises the Error subclass of a non-zero status, with the message."""
    if status != 0:
        message = _lib.flashcpu_last_error(ctx).decode(errors="replace")
        name = _lib.flashcpu_status_name(status).decode()
        raise errors.from_status(status, name, message)


def torch_openmp_runtime():
    """(path, HostOpenmp) of the OpenMP runtime loaded from torch's own
    folders, or (None, None) when torch is not imported or has none."""
    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch, "__file__", None):
        return None, None
    roots = [os.path.dirname(torch.__file__)]
    roots.append(os.path.join(os.path.dirname(roots[0]), "torch.libs"))
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = sorted({line.split()[-1] for line in maps if "/" in line})
    except OSError:
        return None, None
    pattern = re.compile(r"lib(gomp|iomp5|omp)[-.\w]*\.so")
    for path in paths:
        if pattern.match(os.path.basename(path)) and any(path.startswith(r) for r in roots):
            try:
                runtime = ctypes.CDLL(path)
                entry = [ctypes.cast(getattr(runtime, name), ctypes.c_void_p).value
                         for name in ("GOMP_parallel", "omp_get_thread_num",
                                      "omp_get_num_threads")]
            except (OSError, AttributeError):
                continue
            return path, HostOpenmp(*entry)
    return None, None


class Context:
    """A flashcpu context: threads, teams and kernel choice, made once.

    threads: 0 or None for one per core (or OMP_NUM_THREADS);
    isa: "auto", "scalar", "avx2", "avx512" or "neon" (the highest used);
    team_level: "auto", "core", "l2", "l3" or "numa";
    tune_file: a file `flashcpu tune` wrote;
    settings: "key = value" entries separated by ";" or newlines, in the
      tune file's grammar, winning over the tune file key by key, e.g.
      "kernel = fc_prefill_12x32__avx512; splitkv_max_rows = 8" (the keys:
      docs/api.md; kernel names: flashcpu.info()["kernels"]);
    host_openmp: "auto" (default) runs the calls on torch's OpenMP runtime
      when torch is imported (its threads, awake after torch's own work,
      instead of a second pool competing with them), False never does.

    Use one context per Python thread at a time; close() or a with block
    frees it (else the garbage collector does)."""

    def __init__(self, threads=None, isa=None, team_level=None, tune_file=None,
                 settings=None, host_openmp="auto"):
        self._ctx = None
        options = ContextOptions()
        _lib.flashcpu_context_options_init(ctypes.byref(options))
        options.num_threads = _arrays.integer(threads or 0, "threads", 0, _arrays.INT32_MAX)
        if isa is not None:
            if isa not in ISAS:
                raise errors.InvalidArgumentError(
                    "INVALID_ARGUMENT", f"isa {isa!r}: expected one of {sorted(ISAS)}")
            options.max_isa = ISAS[isa]
        if team_level is not None:
            if team_level not in TEAM_LEVELS:
                raise errors.InvalidArgumentError(
                    "INVALID_ARGUMENT",
                    f"team_level {team_level!r}: expected one of {sorted(TEAM_LEVELS)}")
            options.team_level = TEAM_LEVELS[team_level]
        for name, text in (("tune_file", tune_file), ("settings", settings)):
            if text is not None and not isinstance(text, str):
                raise errors.InvalidArgumentError(
                    "INVALID_ARGUMENT", f"{name} must be a str, not {type(text).__name__}")
            if text is not None and "\0" in text:
                raise errors.InvalidArgumentError(
                    "INVALID_ARGUMENT", f"{name} holds a NUL character")
        # Read by flashcpu_context_create only; kept until then.
        encoded = [None if text is None else text.encode() for text in (tune_file, settings)]
        options.tune_file, options.settings = encoded
        self.host_runtime = None
        if host_openmp not in ("auto", False, None):
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", "host_openmp: expected \"auto\" or False")
        if host_openmp == "auto":
            path, host = torch_openmp_runtime()
            if host is not None:
                options.host_openmp = ctypes.pointer(host)
                self.host_runtime = path
        handle = ctypes.c_void_p()
        check(_lib.flashcpu_context_create(ctypes.byref(options), ctypes.byref(handle)),
              None)
        self._ctx = handle

    @property
    def handle(self):
        if self._ctx is None:
            raise errors.InvalidArgumentError("INVALID_ARGUMENT", "the context is closed")
        return self._ctx

    @property
    def last_kernels(self):
        """The kernels the last successful attention call on this context ran
        (comma-separated; a paged step may run two)."""
        return _lib.flashcpu_context_last_kernels(self.handle).decode()

    @property
    def threads(self):
        return _lib.flashcpu_context_num_threads(self.handle)

    @property
    def isa(self):
        return _lib.flashcpu_isa_name(_lib.flashcpu_context_isa(self.handle)).decode()

    def wake(self):
        """Wakes the context's own sleeping worker threads ahead of a call
        (flashcpu_context_wake); nothing on the host's OpenMP runtime."""
        _lib.flashcpu_context_wake(self.handle)

    def describe(self):
        """The plan the context made: topology, teams, kernels, settings."""
        size = _lib.flashcpu_context_describe(self.handle, None, 0) + 1
        buffer = ctypes.create_string_buffer(size)
        _lib.flashcpu_context_describe(self.handle, buffer, size)
        return buffer.value.decode(errors="replace")

    def close(self):
        # getattr: __init__ may have raised before setting it
        if getattr(self, "_ctx", None) is not None:
            changed()  # before the handle goes: no cached address outlives it
            _lib.flashcpu_context_destroy(self._ctx)
            self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if _lib is not None:
            self.close()

    def __repr__(self):
        if self._ctx is None:
            return "flashcpu.Context(closed)"
        host = f", on {self.host_runtime}" if self.host_runtime else ""
        return f"flashcpu.Context(threads={self.threads}, isa={self.isa!r}{host})"


_local = threading.local()
# Called when a default context is made or any context closed (the compiled
# backend caches each thread's default context address until then).
change_hooks = []


def changed():
    for hook in change_hooks:
        hook()


def default_address():
    """This thread's default context's handle as an int."""
    return default_context().handle.value


def resolve(context):
    """context, or this thread's default one for None."""
    if context is None:
        return default_context()
    if not isinstance(context, Context):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT",
            f"context must be a flashcpu.Context or None, not {type(context).__name__}")
    return context


def default_context():
    """This Python thread's default context, made on first use. Made again
    when torch was imported after it, so that it runs on torch's runtime."""
    ctx = getattr(_local, "context", None)
    if ctx is None or (ctx.host_runtime is None and "torch" in sys.modules and
                       not getattr(_local, "checked_torch", False)):
        if ctx is not None:
            _local.checked_torch = True
            if torch_openmp_runtime()[1] is None:
                return ctx
            # Not closed here: a flashcpu.Plan made on it may still hold it
            # (it closes when the last reference goes).
        ctx = Context()
        _local.context = ctx
        changed()
    return ctx
