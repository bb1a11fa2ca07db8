"""Context parallelism over MPI: libflashcpu_mpi through an mpi4py
communicator (include/flashcpu/flashcpu_mpi.h is the contract).

    from mpi4py import MPI
    import flashcpu.mpi

    comm = MPI.COMM_WORLD
    begin, keys = flashcpu.mpi.shard(total_keys, comm.rank, comm.size)
    out = flashcpu.mpi.attention(q, k[:, begin:begin + keys],
                                 v[:, begin:begin + keys], comm, causal=True)

Every rank passes the same q and options and its own contiguous range of
each request's keys (ranks in order, each starting at a multiple of
chunk_keys); every rank (or the root) gets attention over the whole
sequence, with the same bytes for any number of ranks. The call is
collective: every rank of comm makes it.

The library is libflashcpu_mpi.so beside the libflashcpu the package loaded
(or FLASHCPU_MPI_LIBRARY); it must use the MPI that mpi4py uses."""

import ctypes
import ctypes.util
import glob
import os

from . import _api, _arrays, _context, _library, errors

ENV = "FLASHCPU_MPI_LIBRARY"
DEFAULT_CHUNK_KEYS = 16384


class MpiOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("chunk_keys", ctypes.c_int64),
                ("root", ctypes.c_int)]


_mpi = None


def _candidates():
    if os.environ.get(ENV):
        return [os.environ[ENV]]
    found = []
    here = os.path.dirname(os.path.abspath(__file__))
    found += sorted(glob.glob(os.path.join(here, "libflashcpu_mpi.so*")))
    beside = os.path.dirname(_library.loaded_path or "")
    if beside:  # an install's libdir, or a build tree's src/ and src/mpi/
        for folder in (beside, os.path.join(beside, "mpi")):
            found += sorted(glob.glob(os.path.join(folder, "libflashcpu_mpi.so*")))
    name = ctypes.util.find_library("flashcpu_mpi")
    if name:
        found.append(name)
    return found


def _load():
    """libflashcpu_mpi, loaded once; ImportError naming where it looked."""
    global _mpi
    if _mpi is not None:
        return _mpi
    from mpi4py import MPI  # noqa: F401 (MPI's library loaded, initialized)
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{path} ({error})")
            continue
        lib.flashcpu_mpi_options_init.argtypes = [ctypes.c_void_p]
        lib.flashcpu_mpi_options_init.restype = None
        scratch = ctypes.create_string_buffer(4096)
        lib.flashcpu_mpi_options_init(scratch)
        size = ctypes.c_size_t.from_buffer(scratch).value
        if size != ctypes.sizeof(MpiOptions):
            tried.append(f"{path} (options of {size} bytes, {ctypes.sizeof(MpiOptions)} "
                         "here: another version)")
            continue
        tensor = ctypes.POINTER(_library.Tensor)
        lib.flashcpu_mpi_attention_f.argtypes = [
            ctypes.c_void_p, ctypes.c_int, tensor, tensor, tensor, tensor, ctypes.c_void_p,
            ctypes.POINTER(_library.AttentionParams), ctypes.POINTER(MpiOptions)]
        lib.flashcpu_mpi_attention_paged_f.argtypes = [
            ctypes.c_void_p, ctypes.c_int, tensor, ctypes.POINTER(_library.PagedKV),
            ctypes.c_void_p, ctypes.c_int64, tensor, ctypes.c_void_p,
            ctypes.POINTER(_library.AttentionParams), ctypes.POINTER(MpiOptions)]
        lib.flashcpu_mpi_ring_attention_f.argtypes = [
            ctypes.c_void_p, ctypes.c_int, tensor, tensor, tensor, tensor, ctypes.c_void_p,
            ctypes.POINTER(_library.AttentionParams)]
        lib.flashcpu_mpi_shard.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                           ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                           ctypes.POINTER(ctypes.c_int64)]
        lib.flashcpu_mpi_last_error.restype = ctypes.c_char_p
        _mpi = lib
        return lib
    raise ImportError("flashcpu.mpi: cannot load libflashcpu_mpi (built where CMake "
                      "finds MPI); set FLASHCPU_MPI_LIBRARY to its path. Tried: " +
                      ("; ".join(tried) or "nothing found"))


def _check(status):
    if status != 0:
        message = _mpi.flashcpu_mpi_last_error().decode(errors="replace")
        name = _context._lib.flashcpu_status_name(status).decode()
        raise errors.from_status(status, name, message)


def available():
    """Whether mpi4py imports and libflashcpu_mpi loads."""
    try:
        _load()
    except ImportError:
        return False
    return True


def shard(total_keys, rank, ranks, chunk_keys=0):
    """(begin, keys): the balanced range of whole chunks of rank `rank` of
    `ranks` for a sequence of total_keys keys (flashcpu_mpi_shard)."""
    lib = _load()
    begin, keys = ctypes.c_int64(), ctypes.c_int64()
    _check(lib.flashcpu_mpi_shard(_arrays.integer(total_keys, "total_keys"),
                                  _arrays.integer(chunk_keys, "chunk_keys"),
                                  _arrays.integer(rank, "rank", 0, _arrays.INT32_MAX),
                                  _arrays.integer(ranks, "ranks", 1, _arrays.INT32_MAX),
                                  ctypes.byref(begin), ctypes.byref(keys)))
    return begin.value, keys.value


def _prepare(q, comm, keys, dv, batch_rows_heads, *, kv_lengths, chunk_keys, root,
             causal, window, softcap, scale, additive_mask, tree_mask, sinks,
             alibi_slopes, out, return_lse, layout, params, keep):
    """What both entry points share: out and lse on the ranks that
    receive, the options in params, the MpiOptions."""
    batch, rows, heads, dtype = batch_rows_heads
    receives = root is None or root == comm.Get_rank()
    ov = lse = None
    if receives:
        if out is None:
            shape = (batch, rows, heads, dv) if layout == "bshd" else (batch, heads, rows, dv)
            out = _arrays.empty_like_kind(q, shape, dtype)
        _arrays.check_writable(out, "out")
        ov = _arrays.view(out, layout, "out")
        if return_lse:
            lse = _arrays.empty_like_kind(_arrays.raw(q), (batch, heads, rows), _arrays.F32)
    _api.set_options(params, keep, heads=heads, batches=batch, causal=causal, window=window,
                     softcap=softcap, scale=scale, sinks=sinks, alibi_slopes=alibi_slopes)
    _api.set_array_options(params, keep, batch, heads, rows, keys, kv_lengths=kv_lengths,
                           additive_mask=additive_mask, tree_mask=tree_mask)
    options = MpiOptions()
    _mpi.flashcpu_mpi_options_init(ctypes.byref(options))
    options.chunk_keys = _arrays.integer(chunk_keys, "chunk_keys")
    options.root = -1 if root is None else _arrays.integer(root, "root", 0, _arrays.INT32_MAX)
    return out, ov, lse, options


def _result(out, ov, lse, return_lse):
    """What a receiving rank returns (None on the others)."""
    if ov is None:
        return None
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out


def attention(q, k, v, comm, *, kv_lengths=None, chunk_keys=0, root=None, causal=False,
              window=(-1, -1), softcap=0.0, scale=None, additive_mask=None, tree_mask=None,
              sinks=None, alibi_slopes=None, out=None, return_lse=False, layout="bshd",
              context=None):
    """flashcpu_mpi_attention over an mpi4py intra-communicator.

    q [B, L, Hq, D]: the same on every rank. k, v [B, S_r, Hkv, D / Dv]:
    this rank's rows of each request (kv_lengths: how many each request has
    here; default S_r), positions following the previous ranks'. The
    options are flashcpu.attention's, the same on every rank, except
    additive_mask (this rank's key columns, broadcastable to [B, Hq, L,
    S_r]); tree_mask covers the newest keys of the whole sequence.
    chunk_keys: the chunk the bytes are defined over (0: 16384); root: None
    for every rank to receive, else the rank that does (the others get
    None). Returns out (and its float32 lse [B, Hq, L] with return_lse) on
    the ranks that receive. Every rank raises the same flashcpu.Error when
    any rank's input is bad or the ranks disagree."""
    lib = _load()
    if layout not in ("bshd", "bhsd"):
        raise errors.InvalidArgumentError("INVALID_ARGUMENT",
                                          f"layout {layout!r}: expected \"bshd\" or \"bhsd\"")
    ctx = _context.resolve(context)
    keep = []
    params = _api.new_params()
    qv = _arrays.view(q, layout, "q")
    kv, vv = (_api._kv_view(x, False, layout, name, params, keep)
              for x, name in ((k, "k"), (v, "v")))
    out, ov, lse, options = _prepare(
        q, comm, kv.dims[1], vv.dims[3], (qv.dims[0], qv.dims[1], qv.dims[2], qv.dtype),
        kv_lengths=kv_lengths, chunk_keys=chunk_keys, root=root, causal=causal,
        window=window, softcap=softcap, scale=scale, additive_mask=additive_mask,
        tree_mask=tree_mask, sinks=sinks, alibi_slopes=alibi_slopes, out=out,
        return_lse=return_lse, layout=layout, params=params, keep=keep)
    _check(lib.flashcpu_mpi_attention_f(
        ctx.handle, comm.py2f(), ctypes.byref(qv), ctypes.byref(kv), ctypes.byref(vv),
        ctypes.byref(ov) if ov is not None else None,
        None if lse is None else _arrays.geometry(lse)[2], ctypes.byref(params),
        ctypes.byref(options)))
    return _result(out, ov, lse, return_lse)


def attention_paged(q, kv, block_table, kv_lengths, comm, *, chunk_keys=0, root=None,
                    causal=False, window=(-1, -1), softcap=0.0, scale=None,
                    additive_mask=None, tree_mask=None, sinks=None, alibi_slopes=None,
                    out=None, return_lse=False, context=None):
    """flashcpu_mpi_attention_paged: attention as flashcpu.mpi.attention, with
    this rank's keys in a paged cache (a flashcpu.PagedKV): request b's
    local key j is in page block_table[b, j // page_size] (int32 [B,
    pages]), for j < kv_lengths[b]. chunk_keys must be a multiple of the
    page size. q and out are [B, L, Hq, D] ("bshd"). The bytes are those of
    flashcpu.mpi.attention on the same keys held contiguously."""
    lib = _load()
    ctx = _context.resolve(context)
    keep = []
    params = _api.new_params()
    qv = _arrays.view(q, "bshd", "q")
    struct = kv._struct
    table = _arrays.index_array(block_table, "block_table", bits=32, ndim=2)
    keep.append(table)
    if table.shape[0] != qv.dims[0]:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"block_table has {table.shape[0]} rows; expected B = "
            f"{qv.dims[0]}")
    out, ov, lse, options = _prepare(
        q, comm, max(1, table.shape[1] * struct.page_size), struct.v_head_dim,
        (qv.dims[0], qv.dims[1], qv.dims[2], qv.dtype), kv_lengths=kv_lengths,
        chunk_keys=chunk_keys, root=root, causal=causal, window=window, softcap=softcap,
        scale=scale, additive_mask=additive_mask, tree_mask=tree_mask, sinks=sinks,
        alibi_slopes=alibi_slopes, out=out, return_lse=return_lse, layout="bshd",
        params=params, keep=keep)
    _check(lib.flashcpu_mpi_attention_paged_f(
        ctx.handle, comm.py2f(), ctypes.byref(qv), ctypes.byref(struct),
        table.ctypes.data if table.size else None, table.shape[1],
        ctypes.byref(ov) if ov is not None else None,
        None if lse is None else _arrays.geometry(lse)[2], ctypes.byref(params),
        ctypes.byref(options)))
    return _result(out, ov, lse, return_lse)


def ring_attention(q, k, v, comm, *, causal=False, window=(-1, -1), softcap=0.0,
                   scale=None, sinks=None, alibi_slopes=None, out=None, return_lse=False,
                   context=None):
    """flashcpu_mpi_ring_attention: prefill of a prompt of 2N blocks of Bs
    rows over the N ranks of comm in zigzag order. This rank's q [B, 2Bs,
    Hq, D], k and v [B, 2Bs, Hkv, D / Dv] hold blocks r (rows 0..Bs-1) and
    2N-1-r (rows Bs..2Bs-1) of the prompt; returns this rank's rows of the
    result (and their float32 lse [B, Hq, 2Bs] with return_lse). Options as
    flashcpu.attention's (no masks but causal and the window), the same on
    every rank; positions are the prompt's. Every rank raises the same
    flashcpu.Error on bad input."""
    lib = _load()
    ctx = _context.resolve(context)
    keep = []
    params = _api.new_params()
    qv = _arrays.view(q, "bshd", "q")
    kv = _arrays.view(k, "bshd", "k")
    vv = _arrays.view(v, "bshd", "v")
    batch, rows, heads = qv.dims[0], qv.dims[1], qv.dims[2]
    if out is None:
        out = _arrays.empty_like_kind(q, (batch, rows, heads, vv.dims[3]), qv.dtype)
    _arrays.check_writable(out, "out")
    ov = _arrays.view(out, "bshd", "out")
    lse = (_arrays.empty_like_kind(_arrays.raw(q), (batch, heads, rows), _arrays.F32)
           if return_lse else None)
    _api.set_options(params, keep, heads=heads, batches=batch, causal=causal, window=window,
                     softcap=softcap, scale=scale, sinks=sinks, alibi_slopes=alibi_slopes)
    _check(lib.flashcpu_mpi_ring_attention_f(
        ctx.handle, comm.py2f(), ctypes.byref(qv), ctypes.byref(kv), ctypes.byref(vv),
        ctypes.byref(ov), None if lse is None else _arrays.geometry(lse)[2],
        ctypes.byref(params)))
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out
