"""Finding and loading libflashcpu, and the ctypes mirrors of its structs
(include/flashcpu/flashcpu.h; tests/python/test_struct_layout.py checks
every one against the C structs). The package ships its library: the
mirrors are this version's, and a library of another version is refused."""

import ctypes
import ctypes.util
import glob
import os
import sys

ENV = "FLASHCPU_LIBRARY"


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("dims", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4)]


class HostOpenmp(ctypes.Structure):
    _fields_ = [("parallel", ctypes.c_void_p), ("thread_num", ctypes.c_void_p),
                ("num_threads", ctypes.c_void_p)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_threads", ctypes.c_int),
                ("team_level", ctypes.c_int), ("max_team_size", ctypes.c_int),
                ("max_isa", ctypes.c_int), ("tune_file", ctypes.c_char_p),
                ("settings", ctypes.c_char_p),
                ("host_openmp", ctypes.POINTER(HostOpenmp))]


class TreeMask(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_void_p), ("num_rows", ctypes.c_int64),
                ("num_keys", ctypes.c_int64), ("row_stride", ctypes.c_int64),
                ("batch_stride", ctypes.c_int64)]


class AdditiveMask(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("strides", ctypes.c_int64 * 4)]


class KvScales(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("strides", ctypes.c_int64 * 4), ("zero_points", ctypes.c_void_p)]


class AttentionParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("scale", ctypes.c_float),
                ("flags", ctypes.c_uint32), ("window_left", ctypes.c_int64),
                ("window_right", ctypes.c_int64), ("softcap", ctypes.c_float),
                ("tree_mask", ctypes.POINTER(TreeMask)),
                ("additive_mask", ctypes.POINTER(AdditiveMask)),
                ("kv_lengths", ctypes.POINTER(ctypes.c_int64)),
                ("sinks", ctypes.c_void_p), ("sinks_dtype", ctypes.c_int),
                ("alibi_slopes", ctypes.c_void_p), ("alibi_batch_stride", ctypes.c_int64),
                ("k_scales", ctypes.POINTER(KvScales)), ("v_scales", ctypes.POINTER(KvScales)),
                ("query_offsets", ctypes.POINTER(ctypes.c_int64))]


class PagedKV(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("k_dtype", ctypes.c_int), ("v_dtype", ctypes.c_int),
                ("num_pages", ctypes.c_int64), ("page_size", ctypes.c_int64),
                ("kv_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("v_head_dim", ctypes.c_int64),
                ("k_strides", ctypes.c_int64 * 3), ("v_strides", ctypes.c_int64 * 3),
                ("k_scales", ctypes.POINTER(KvScales)), ("v_scales", ctypes.POINTER(KvScales))]


class Batch(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_requests", ctypes.c_int64),
                ("cu_seqlens_q", ctypes.c_void_p), ("seq_lens_kv", ctypes.c_void_p),
                ("block_table", ctypes.c_void_p), ("block_table_stride", ctypes.c_int64),
                ("block_offsets", ctypes.c_void_p),
                ("tree_mask", ctypes.POINTER(TreeMask)), ("tree_num_keys", ctypes.c_void_p)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("name", ctypes.c_char_p), ("family", ctypes.c_char_p),
                ("isa", ctypes.c_int), ("runnable", ctypes.c_int),
                ("weights_dtype", ctypes.c_int), ("forced_only", ctypes.c_int)]


FLAG_CAUSAL = 0x1
ISAS = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3, "neon": 4}
TEAM_LEVELS = {"auto": 0, "core": 1, "l2": 2, "l3": 3, "numa": 4}


def candidates():
    """Where the library is looked for, in order."""
    found = []
    if os.environ.get(ENV):
        return [os.environ[ENV]]
    here = os.path.dirname(os.path.abspath(__file__))
    found += sorted(glob.glob(os.path.join(here, "libflashcpu.so*")))
    try:  # written by cmake --install: where that install put the library
        from ._installed import LIBRARY
        found.append(LIBRARY)
    except ImportError:
        pass
    # An installed prefix: this interpreter's, then the usual ones.
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        for lib in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
            found += sorted(glob.glob(os.path.join(prefix, lib, "libflashcpu.so*")))
    name = ctypes.util.find_library("flashcpu")
    if name:
        found.append(name)
    return found


def _declare(lib):
    c_ctx = ctypes.c_void_p
    lib.flashcpu_version_string.restype = ctypes.c_char_p
    lib.flashcpu_status_name.argtypes = [ctypes.c_int]
    lib.flashcpu_status_name.restype = ctypes.c_char_p
    lib.flashcpu_isa_name.argtypes = [ctypes.c_int]
    lib.flashcpu_isa_name.restype = ctypes.c_char_p
    lib.flashcpu_cpu_features.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.flashcpu_cpu_features.restype = ctypes.c_size_t
    # The init functions take any buffer: load() checks the struct_size they
    # write (_struct_size) before anything else.
    lib.flashcpu_context_options_init.argtypes = [ctypes.c_void_p]
    lib.flashcpu_attention_params_init.argtypes = [ctypes.c_void_p]
    lib.flashcpu_kernel_info_init.argtypes = [ctypes.c_void_p]
    lib.flashcpu_batch_init.argtypes = [ctypes.c_void_p]
    lib.flashcpu_context_create.argtypes = [ctypes.POINTER(ContextOptions),
                                            ctypes.POINTER(c_ctx)]
    lib.flashcpu_context_destroy.argtypes = [c_ctx]
    lib.flashcpu_context_num_threads.argtypes = [c_ctx]
    lib.flashcpu_context_wake.argtypes = [c_ctx]
    lib.flashcpu_context_wake.restype = None
    lib.flashcpu_context_isa.argtypes = [c_ctx]
    lib.flashcpu_context_last_kernels.argtypes = [c_ctx]
    lib.flashcpu_context_last_kernels.restype = ctypes.c_char_p
    lib.flashcpu_context_describe.argtypes = [c_ctx, ctypes.c_char_p, ctypes.c_size_t]
    lib.flashcpu_context_describe.restype = ctypes.c_size_t
    lib.flashcpu_last_error.argtypes = [c_ctx]
    lib.flashcpu_last_error.restype = ctypes.c_char_p
    lib.flashcpu_kernel_info_get.argtypes = [ctypes.c_int, ctypes.POINTER(KernelInfo)]
    tensor = ctypes.POINTER(Tensor)
    lib.flashcpu_attention.argtypes = [c_ctx, tensor, tensor, tensor, tensor,
                                       ctypes.c_void_p, ctypes.POINTER(AttentionParams)]
    lib.flashcpu_merge_states.argtypes = [c_ctx, ctypes.c_int64, tensor,
                                          ctypes.POINTER(ctypes.c_void_p), tensor,
                                          ctypes.c_void_p]
    lib.flashcpu_quantize.argtypes = [c_ctx, tensor, tensor, ctypes.POINTER(KvScales)]
    lib.flashcpu_dequantize.argtypes = [c_ctx, tensor, ctypes.POINTER(KvScales), tensor]
    paged = ctypes.POINTER(PagedKV)
    lib.flashcpu_plan_create.argtypes = [c_ctx, ctypes.POINTER(Batch), ctypes.c_int64,
                                         ctypes.c_int, ctypes.c_int, paged,
                                         ctypes.POINTER(ctypes.c_void_p)]
    lib.flashcpu_plan_workspace_size.argtypes = [ctypes.c_void_p]
    lib.flashcpu_plan_workspace_size.restype = ctypes.c_size_t
    lib.flashcpu_plan_set_workspace.argtypes = [c_ctx, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_size_t]
    lib.flashcpu_plan_destroy.argtypes = [ctypes.c_void_p]
    lib.flashcpu_plan_destroy.restype = None
    lib.flashcpu_plan_num_tokens.argtypes = [ctypes.c_void_p]
    lib.flashcpu_plan_num_tokens.restype = ctypes.c_int64
    lib.flashcpu_plan_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.flashcpu_plan_describe.restype = ctypes.c_size_t
    lib.flashcpu_attention_paged.argtypes = [c_ctx, ctypes.c_void_p, tensor, paged, tensor,
                                             ctypes.c_void_p,
                                             ctypes.POINTER(AttentionParams)]
    lib.flashcpu_kv_append.argtypes = [c_ctx, tensor, tensor, ctypes.c_void_p, paged]


def _struct_size(init):
    """The struct_size an init function writes (into a scratch buffer larger
    than any of these structs, so that another version's larger struct
    cannot overflow it)."""
    scratch = ctypes.create_string_buffer(4096)
    init(scratch)
    return ctypes.c_size_t.from_buffer(scratch).value


def _other_version(lib):
    """Why lib is not the library these mirrors describe, or None."""
    for struct, init in ((ContextOptions, "flashcpu_context_options_init"),
                         (AttentionParams, "flashcpu_attention_params_init"),
                         (KernelInfo, "flashcpu_kernel_info_init"),
                         (Batch, "flashcpu_batch_init")):
        function = getattr(lib, init, None)
        if function is None:
            return f"no {init}"
        function.argtypes = [ctypes.c_void_p]
        size = _struct_size(function)
        if size != ctypes.sizeof(struct):
            return (f"{init} writes struct_size {size}, "
                    f"{ctypes.sizeof(struct)} here")
    return None


def untyped_attention(lib):
    """flashcpu_attention as a second function object taking plain
    addresses: the transformers backend's common call packs its views
    itself, and ctypes then converts no argument types."""
    function = lib["flashcpu_attention"]
    function.argtypes = [ctypes.c_void_p] * 7
    function.restype = ctypes.c_int
    return function


def load():
    """The loaded library, its path; ImportError naming where it looked."""
    tried = []
    for path in candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{path} ({error})")
            continue
        mismatch = _other_version(lib)
        if mismatch:
            tried.append(f"{path} ({mismatch}: another version)")
            continue
        _declare(lib)
        return lib, path
    raise ImportError("flashcpu: cannot load libflashcpu; set FLASHCPU_LIBRARY to its "
                      "path, or install it (cmake --install). Tried: " +
                      ("; ".join(tried) if tried else "nothing found"))
