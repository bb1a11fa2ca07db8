"""Context parallelism over a torch.distributed process group (gloo, or any
backend whose collectives take CPU tensors): flashcpu.mpi's entry points,
for programs that already run torch.distributed instead of MPI.

    import torch.distributed as dist
    import flashcpu.distributed as cp

    dist.init_process_group("gloo", ...)
    begin, keys = cp.shard(total_keys, dist.get_rank(), dist.get_world_size())
    out = cp.attention(q, k[:, begin:begin + keys], v[:, begin:begin + keys],
                       causal=True)

Every rank passes the same q and options and its own contiguous range of
each request's keys (ranks in order, each starting at a multiple of
chunk_keys). The calls are collective: every rank of the group makes them.
The bytes are those of flashcpu.mpi on the same chunks (the same chunk
states, merged in the same order by the same library calls), so they do not
depend on the number of ranks or threads; ring_attention's depend on the
number of ranks, as the MPI ring's do. Each call makes a few collectives
besides the states' exchange (the ranks' checks, and a verdict after each
step, so that an error on any rank raises the same flashcpu.Error on every
rank); a rank that never makes the call leaves the others waiting until the
group's timeout (init_process_group(timeout=...)), which torch reports."""

from . import _api, _arrays, _context, _cp_chunks, _cp_group, _cp_ring, _quantized, errors
from ._cp_chunks import DEFAULT_CHUNK_KEYS, shard
from ._paged import PagedKV

__all__ = ["attention", "attention_paged", "ring_attention", "shard", "available",
           "DEFAULT_CHUNK_KEYS"]

_DTYPE_NAMES = {_arrays.F32: "float32", _arrays.F16: "float16", _arrays.BF16: "bfloat16"}


def available():
    """Whether torch.distributed is there (the calls also need it
    initialized)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available()


class _Call:
    """One rank's part of a call, checked: shapes, dtypes, options."""


def _small(values, what):
    """sinks / ALiBi slopes as an array or tensor (sequences: float32)."""
    if values is None or _arrays.kind_of_or_none(values) is not None:
        return values
    import numpy
    return numpy.asarray(values, dtype=numpy.float32)


def _options(call, params, keep, *, causal, window, softcap, scale, sinks, alibi_slopes,
             additive_mask=None, tree_mask=None):
    """Checks the options as flashcpu.attention would and keeps them."""
    sinks, alibi_slopes = _small(sinks, "sinks"), _small(alibi_slopes, "alibi_slopes")
    if tree_mask is not None and _arrays.kind_of_or_none(tree_mask) is None:
        import numpy
        tree_mask = numpy.asarray(tree_mask, dtype=bool)
    _api.set_options(params, keep, heads=call.heads, batches=call.batch, causal=causal,
                     window=window, softcap=softcap, scale=scale, sinks=sinks,
                     alibi_slopes=alibi_slopes)
    call.options = {"causal": bool(causal), "window": tuple(window), "softcap": softcap,
                    "scale": scale, "sinks": sinks, "alibi_slopes": alibi_slopes,
                    "additive_mask": additive_mask, "tree_mask": tree_mask}
    call.window_left = params.window_left


def _fields(call, chunk_keys, root, params):
    """What every rank must pass alike, named for the error that says where
    they differ."""
    o = call.options
    tree, sinks, slopes = o["tree_mask"], o["sinks"], o["alibi_slopes"]
    return [
        ("q's batch (requests)", call.batch), ("q's seq (query rows)", call.rows),
        ("q's heads", call.heads), ("head_dim", call.head_dim),
        ("k and v heads", call.kv_heads), ("v's head_dim", call.dv),
        ("q's dtype", call.q_dtype), ("k's dtype", call.k_dtype),
        ("v's dtype", call.v_dtype), ("chunk_keys", chunk_keys), ("root", root),
        ("scale", params.scale), ("causal", o["causal"]),
        ("window", (params.window_left, params.window_right)),
        ("softcap", params.softcap), ("whether a tree mask is given", tree is not None),
        ("the tree mask's keys", None if tree is None else tuple(tree.shape)),
        ("whether sinks are given", sinks is not None),
        ("the sinks' dtype", None if sinks is None else params.sinks_dtype),
        ("whether ALiBi slopes are given", slopes is not None),
        ("whether ALiBi slopes are per request", params.alibi_batch_stride != 0),
        ("whether an additive mask is given", o["additive_mask"] is not None),
        ("q's values (hash)", _cp_group.value_hash(call.q)),
        ("the sinks' values (hash)", _cp_group.value_hash(sinks)),
        ("the ALiBi slopes' values (hash)", _cp_group.value_hash(slopes)),
        ("the tree mask's bits (hash)", _cp_group.value_hash(tree)),
    ]


def _lengths(kv_lengths, batch, keys):
    if kv_lengths is None:
        return [keys] * batch
    values = [int(x) for x in _arrays.index_array(kv_lengths, "kv_lengths", bits=64)]
    if len(values) != batch:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"kv_lengths has {len(values)} entries; expected B = {batch}")
    for b, n in enumerate(values):
        if not 0 <= n <= keys:
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", f"kv_lengths[{b}] is {n}; this rank holds {keys} keys "
                "a request")
    return values


def _common(call, q, layout, context, kv_heads, head_dim, dv, k_dtype, v_dtype):
    qv = _arrays.view(q, layout, "q")
    call.q, call.layout, call.context = q, layout, _context.resolve(context)
    call.batch, call.rows, call.heads, call.head_dim = (qv.dims[i] for i in range(4))
    call.q_dtype, call.q_dtype_name = qv.dtype, _DTYPE_NAMES[qv.dtype]
    call.kv_heads, call.dv, call.k_dtype, call.v_dtype = kv_heads, dv, k_dtype, v_dtype
    if head_dim != call.head_dim or kv_heads < 1 or call.heads % kv_heads:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"q [.., {call.heads} heads, D {call.head_dim}] and k/v "
            f"[.., {kv_heads} heads, D {head_dim}] do not fit together (Hq a multiple "
            "of Hkv, the same D)")


def _contiguous_call(q, k, v, layout, kv_lengths, options):
    if layout not in ("bshd", "bhsd"):
        raise errors.InvalidArgumentError("INVALID_ARGUMENT",
                                          f"layout {layout!r}: expected \"bshd\" or \"bhsd\"")
    call, params, keep = _Call(), _api.new_params(), []
    kv, vv = (_api._kv_view(x, _quantized.is_quantized(x), layout, name, params, keep)
              for x, name in ((k, "k"), (v, "v")))
    if kv.dims[0] != vv.dims[0] or kv.dims[1] != vv.dims[1] or kv.dims[2] != vv.dims[2]:
        raise errors.ShapeMismatchError("SHAPE_MISMATCH", "k and v differ in B, S or Hkv")
    _common(call, options.pop("q"), layout, options.pop("context"), kv.dims[2], kv.dims[3],
            vv.dims[3], kv.dtype, vv.dtype)
    if kv.dims[0] != call.batch:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"k has batch {kv.dims[0]}; q has {call.batch}")
    call.k, call.v, call.paged = k, v, None
    call.seq_axis = 1 if layout == "bshd" else 2
    call.local_keys = kv.dims[1]
    call.lengths = _lengths(kv_lengths, call.batch, kv.dims[1])
    _options(call, params, keep, **options)
    _api.set_array_options(params, keep, call.batch, call.heads, call.rows, kv.dims[1],
                           additive_mask=options["additive_mask"],
                           tree_mask=options["tree_mask"])
    return call, params


def _paged_call(q, kv, block_table, kv_lengths, chunk_keys, options):
    if not isinstance(kv, PagedKV):
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"kv must be a flashcpu.PagedKV, not {type(kv).__name__}")
    call, params, keep = _Call(), _api.new_params(), []
    s = kv._struct
    _common(call, options.pop("q"), "bshd", options.pop("context"), s.kv_heads, s.head_dim,
            s.v_head_dim, s.k_dtype, s.v_dtype)
    table = _arrays.index_array(block_table, "block_table", bits=32, ndim=2)
    if table.shape[0] != call.batch:
        raise errors.ShapeMismatchError(
            "SHAPE_MISMATCH", f"block_table has {table.shape[0]} rows; expected B = "
            f"{call.batch}")
    if kv_lengths is None:
        raise errors.InvalidArgumentError("INVALID_ARGUMENT", "a paged call needs kv_lengths")
    if (chunk_keys or DEFAULT_CHUNK_KEYS) % s.page_size:
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"chunk_keys {chunk_keys or DEFAULT_CHUNK_KEYS} is not a "
            f"multiple of the page size {s.page_size}")
    call.paged, call.local_keys = (kv, table), table.shape[1] * s.page_size
    call.lengths = _lengths(kv_lengths, call.batch, call.local_keys)
    _options(call, params, keep, **options)
    _api.set_array_options(params, keep, call.batch, call.heads, call.rows,
                           max(1, call.local_keys), additive_mask=options["additive_mask"],
                           tree_mask=options["tree_mask"])
    return call, params


def _call_options(q, context, causal, window, softcap, scale, sinks, alibi_slopes,
                  additive_mask, tree_mask):
    """The keyword options both decode entry points hand their chunk calls."""
    return dict(q=q, context=context, causal=causal, window=window, softcap=softcap,
                scale=scale, sinks=sinks, alibi_slopes=alibi_slopes,
                additive_mask=additive_mask, tree_mask=tree_mask)


def _run(g, name, make, chunk_keys, root, out, return_lse):
    """The steps every chunked call takes, each ending in a verdict."""
    call = error = fields = None
    out_and_lse = (None, None)
    try:
        call, params = make()
        chunk_keys = _arrays.integer(chunk_keys, "chunk_keys")
        if chunk_keys < 0:
            raise errors.InvalidArgumentError("INVALID_ARGUMENT",
                                              f"chunk_keys is {chunk_keys}; need >= 0")
        chunk_keys = chunk_keys or DEFAULT_CHUNK_KEYS
        if root is not None:
            root = _arrays.integer(root, "root")
            if not 0 <= root < g.size:
                raise errors.InvalidArgumentError(
                    "INVALID_ARGUMENT", f"root is {root}; the group has {g.size} ranks")
        fields = _fields(call, chunk_keys, root, params)
        if root is None or root == g.rank:
            out_and_lse = _receiving(call, out, return_lse)
    except Exception as failure:  # passed to every rank by agree_on
        error = failure
    lengths = g.agree_on(name, error, fields or [], None if call is None else call.lengths)
    try:
        chunks = _cp_chunks.Chunks(lengths, chunk_keys, call.rows, call.window_left, name)
        tree = call.options["tree_mask"]
        if tree is not None and tree.shape[2] > min(chunks.totals):
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", f"{name}: the tree mask covers {tree.shape[2]} keys but a "
                f"request has only {min(chunks.totals)} on all ranks together")
        own = _cp_chunks.compute_own(call, chunks, g.rank)
    except Exception as failure:
        error = failure
    g.agree(error)
    states = own if g.size == 1 else g.exchange(own, chunks.records, root)
    error = None
    out, lse = out_and_lse
    if states is not None:
        try:
            _cp_chunks.merge(call, chunks, states, out, lse)
        except Exception as failure:
            error = failure
    g.agree(error)
    if states is None:
        return None
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out


def _receiving(call, out, return_lse):
    """out (checked, or new) and lse (or None) on a rank that receives."""
    shape = (call.batch, call.rows, call.heads, call.dv)
    if call.layout == "bhsd":
        shape = (call.batch, call.heads, call.rows, call.dv)
    if out is None:
        out = _arrays.empty_like_kind(call.q, shape, call.q_dtype)
    _arrays.check_writable(out, "out")
    if tuple(_arrays.view(out, call.layout, "out").dims) != shape:
        raise errors.ShapeMismatchError("SHAPE_MISMATCH", f"out must be {list(shape)}")
    lse = None
    if return_lse:
        lse = _arrays.empty_like_kind(_arrays.raw(call.q), (call.batch, call.heads, call.rows),
                                      _arrays.F32)
    return out, lse


def attention(q, k, v, group=None, *, kv_lengths=None, chunk_keys=0, root=None,
              causal=False, window=(-1, -1), softcap=0.0, scale=None, additive_mask=None,
              tree_mask=None, sinks=None, alibi_slopes=None, out=None, return_lse=False,
              layout="bshd", context=None):
    """flashcpu.mpi.attention over a torch.distributed group (None: the
    default group). q [B, L, Hq, D]: the same on every rank. k, v [B, S_r,
    Hkv, D / Dv]: this rank's rows of each request (kv_lengths: how many
    each request has here; default S_r), positions following the previous
    ranks'. The options are flashcpu.attention's, the same on every rank,
    except additive_mask (this rank's key columns, broadcastable to [B, Hq,
    L, S_r]); tree_mask covers the newest keys of the whole sequence.
    chunk_keys: the chunk the bytes are defined over (0: 16384); root: None
    for every rank to receive, else the group rank that does (the others
    get None). Returns out (and its float32 lse [B, Hq, L] with return_lse)
    on the ranks that receive. Every rank raises the same flashcpu.Error
    when any rank's input is bad or the ranks disagree."""
    g = _cp_group.Group(group)
    options = _call_options(q, context, causal, window, softcap, scale, sinks, alibi_slopes,
                            additive_mask, tree_mask)
    return _run(g, "flashcpu.distributed.attention",
                lambda: _contiguous_call(q, k, v, layout, kv_lengths, options),
                chunk_keys, root, out, return_lse)


def attention_paged(q, kv, block_table, kv_lengths, group=None, *, chunk_keys=0, root=None,
                    causal=False, window=(-1, -1), softcap=0.0, scale=None,
                    additive_mask=None, tree_mask=None, sinks=None, alibi_slopes=None,
                    out=None, return_lse=False, context=None):
    """flashcpu.mpi.attention_paged over a torch.distributed group: this
    rank's keys of request b in pages block_table[b, j // page_size] of kv
    (a flashcpu.PagedKV) for j < kv_lengths[b]; chunk_keys a multiple of
    the page size; q and out [B, L, Hq, D]. The bytes are those of
    attention() on the same keys held contiguously."""
    g = _cp_group.Group(group)
    options = _call_options(q, context, causal, window, softcap, scale, sinks, alibi_slopes,
                            additive_mask, tree_mask)
    return _run(g, "flashcpu.distributed.attention_paged",
                lambda: _paged_call(q, kv, block_table, kv_lengths, chunk_keys, options),
                chunk_keys, root, out, return_lse)


def ring_attention(q, k, v, group=None, *, causal=False, window=(-1, -1), softcap=0.0,
                   scale=None, sinks=None, alibi_slopes=None, out=None, return_lse=False,
                   context=None):
    """flashcpu.mpi.ring_attention over a torch.distributed group: prefill
    of a prompt of 2N blocks of Bs rows over the N ranks in zigzag order.
    This rank's q [B, 2Bs, Hq, D], k and v [B, 2Bs, Hkv, D / Dv] (float32,
    float16 or bfloat16) hold blocks r (rows 0..Bs-1) and 2N-1-r (rows
    Bs..2Bs-1) of the prompt; returns this rank's rows of the result (and
    their float32 lse [B, Hq, 2Bs] with return_lse)."""
    g = _cp_group.Group(group)
    name = "flashcpu.distributed.ring_attention"
    call = error = ring = None
    fields, out_and_lse = [], (None, None)
    try:
        call, params, keep = _Call(), _api.new_params(), []
        kv, vv = _arrays.view(k, "bshd", "k"), _arrays.view(v, "bshd", "v")
        _common(call, q, "bshd", context, kv.dims[2], kv.dims[3], vv.dims[3], kv.dtype,
                vv.dtype)
        if call.rows % 2 or kv.dims[1] != call.rows or vv.dims[1] != call.rows or \
                kv.dims[0] != call.batch or vv.dims[0] != call.batch or \
                vv.dims[2] != kv.dims[2]:
            raise errors.ShapeMismatchError(
                "SHAPE_MISMATCH", f"q, k and v must hold the same two blocks: q [B, 2Bs, ..] "
                f"has {call.rows} rows, k {kv.dims[1]}, v {vv.dims[1]}")
        _options(call, params, keep, causal=causal, window=window, softcap=softcap,
                 scale=scale, sinks=sinks, alibi_slopes=alibi_slopes)
        fields = [f for f in _fields(call, 0, None, params)
                  if f[0] not in ("q's values (hash)", "chunk_keys", "root")]
        fields[1] = ("the block (half of q's rows)", call.rows // 2)
        out_and_lse = _receiving(call, out, return_lse)
        ring = _cp_ring.Ring(g, q, k, v, call.options, call.context)
    except Exception as failure:
        error = failure
    g.agree_on(name, error, fields)
    g.agree(ring.run())
    error = None
    out, lse = out_and_lse
    try:
        ring.finish(out, lse)
    except Exception as failure:
        error = failure
    g.agree(error)
    out = _arrays.raw(out)
    return (out, lse) if return_lse else out
