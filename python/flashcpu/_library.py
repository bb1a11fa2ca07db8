"""Finding and loading libflashcpu, and the ctypes mirrors of its structs
(include/flashcpu/flashcpu.h)."""

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
                ("splitkv_max_rows", ctypes.c_int), ("launch", ctypes.c_int),
                ("prefill_bf16_dot", ctypes.c_int), ("decode_bf16_dot", ctypes.c_int),
                ("decode_prefetch", ctypes.c_int), ("kernel", ctypes.c_char_p),
                ("host_openmp", ctypes.POINTER(HostOpenmp)),
                ("prefill_amx", ctypes.c_int)]


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
                # Added in the library's 0.3.0 (attention sinks, ALiBi).
                ("sinks", ctypes.c_void_p), ("sinks_dtype", ctypes.c_int),
                ("alibi_slopes", ctypes.c_void_p), ("alibi_batch_stride", ctypes.c_int64),
                # Quantized K/V scales (the same release).
                ("k_scales", ctypes.POINTER(KvScales)), ("v_scales", ctypes.POINTER(KvScales))]


class PagedKV(ctypes.Structure):
    _fields_ = [("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
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
                ("block_offsets", ctypes.c_void_p), ("tree_bits", ctypes.c_void_p),
                ("tree_row_stride", ctypes.c_int64), ("tree_num_keys", ctypes.c_void_p)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("family", ctypes.c_char_p),
                ("isa", ctypes.c_int), ("runnable", ctypes.c_int),
                ("weights_dtype", ctypes.c_int)]


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
    # The init functions write their library's struct_size (_struct_size).
    lib.flashcpu_context_options_init.argtypes = [ctypes.c_void_p]
    lib.flashcpu_attention_params_init.argtypes = [ctypes.c_void_p]
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
    try:  # quantized K/V
        lib.flashcpu_quantize.argtypes = [c_ctx, tensor, tensor, ctypes.POINTER(KvScales)]
        lib.flashcpu_dequantize.argtypes = [c_ctx, tensor, ctypes.POINTER(KvScales), tensor]
    except AttributeError:
        pass
    try:  # paged KV caches and ragged batches (the library's 0.3.0)
        lib.flashcpu_batch_init
    except AttributeError:
        return
    paged = ctypes.POINTER(PagedKV)
    lib.flashcpu_batch_init.argtypes = [ctypes.c_void_p]
    lib.flashcpu_plan_create.argtypes = [c_ctx, ctypes.POINTER(Batch), ctypes.c_int64,
                                         paged, ctypes.POINTER(ctypes.c_void_p)]
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


# What the loaded library has, set by load(): the size of its
# flashcpu_attention_params (smaller than AttentionParams for a 0.2.0
# library: no sinks, no ALiBi) and whether it has the paged functions (with
# a flashcpu_batch of this module's size).
params_size = 0
has_paged = False


def _struct_size(init):
    """The struct_size an init function writes (into a scratch buffer larger
    than any of these structs, so that a later library's larger struct
    cannot overflow it)."""
    scratch = ctypes.create_string_buffer(4096)
    init(scratch)
    return ctypes.c_size_t.from_buffer(scratch).value


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
        _declare(lib)
        size = _struct_size(lib.flashcpu_context_options_init)
        if size != ctypes.sizeof(ContextOptions):
            tried.append(f"{path} (flashcpu_context_options is {size} "
                         f"bytes there, {ctypes.sizeof(ContextOptions)} here: another "
                         "version)")
            continue
        global params_size, has_paged
        params_size = _struct_size(lib.flashcpu_attention_params_init)
        has_paged = (hasattr(lib, "flashcpu_batch_init") and
                     _struct_size(lib.flashcpu_batch_init) == ctypes.sizeof(Batch))
        return lib, path
    raise ImportError("flashcpu: cannot load libflashcpu; set FLASHCPU_LIBRARY to its "
                      "path, or install it (cmake --install). Tried: " +
                      ("; ".join(tried) if tried else "nothing found"))
