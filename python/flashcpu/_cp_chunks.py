"""The chunks of flashcpu.distributed.attention, as libflashcpu_mpi makes
them: each request's keys cut into chunks of chunk_keys positions of the
whole sequence; the state (out, lse) of every chunk some row can see,
computed by the rank that holds it as a call of its own (the queries placed
after it with query_offsets); the states merged in the fixed order [sink,
chunk 0, chunk 1, ...]. What a chunk computes depends on its place in the
sequence only, so the bytes do not depend on the number of ranks."""

from . import _api, _arrays, _quantized, errors
from ._paged import Plan, attention_paged

DEFAULT_CHUNK_KEYS = 16384


def shard(total_keys, rank, ranks, chunk_keys=0):
    """(begin, keys): rank `rank` of `ranks`'s balanced share of whole
    chunks of a sequence of total_keys keys (flashcpu_mpi_shard's rule)."""
    total_keys = _arrays.integer(total_keys, "total_keys")
    chunk_keys = _arrays.integer(chunk_keys, "chunk_keys")
    rank = _arrays.integer(rank, "rank")
    ranks = _arrays.integer(ranks, "ranks")
    if total_keys < 0 or chunk_keys < 0 or ranks < 1 or not 0 <= rank < ranks:
        raise errors.InvalidArgumentError(
            "INVALID_ARGUMENT", f"shard: total_keys {total_keys}, chunk_keys {chunk_keys}, "
            f"rank {rank} of {ranks}: need total_keys >= 0, chunk_keys >= 0 and "
            "0 <= rank < ranks")
    chunk_keys = chunk_keys or DEFAULT_CHUNK_KEYS
    chunks = -(-total_keys // chunk_keys)
    share, extra = divmod(chunks, ranks)
    first = rank * share + min(rank, extra)
    count = share + (rank < extra)
    begin = min(first * chunk_keys, total_keys)
    return begin, max(0, min((first + count) * chunk_keys, total_keys) - begin)


def take(x, axis, start, count, batch=None):
    """x's [start, start + count) along axis (and batch b alone, kept as a
    dim of 1): arrays, tensors, flashcpu.bf16 and flashcpu.Quantized."""
    index = [slice(None)] * (axis + 1)
    index[axis] = slice(start, start + count)
    if batch is not None:
        index[0] = slice(batch, batch + 1)
    index = tuple(index)
    if isinstance(x, _arrays.bf16):
        return _arrays.bf16(x.array[index])
    if isinstance(x, _quantized.Quantized):
        codes = x.codes[index]
        scales, zeros = (None if s is None else _broadcast(s, x.shape)[index]
                         for s in (x.scales, x.zero_points))
        return _quantized.Quantized(codes, x.format, scales, zeros)
    return x[index]


def _broadcast(values, shape):
    """values broadcast to shape without a copy (numpy or torch)."""
    if _arrays.kind_of_or_none(values) == "torch":
        return values.expand(shape)
    import numpy
    return numpy.broadcast_to(values, shape)


class Chunks:
    """Where every chunk's state lies once the ranks agreed on their
    lengths (lengths[r][b]: rank r's keys of request b)."""

    def __init__(self, lengths, chunk_keys, rows, window_left, call):
        ranks, batch = len(lengths), len(lengths[0])
        self.chunk_keys, self.rows, self.window_left = chunk_keys, rows, window_left
        self.starts = [[0] * batch for _ in range(ranks)]
        self.totals = [0] * batch
        for b in range(batch):
            total = 0
            for r in range(ranks):
                self.starts[r][b] = total
                if lengths[r][b] > 0 and total % chunk_keys:
                    raise errors.InvalidArgumentError(
                        "INVALID_ARGUMENT", f"{call}: rank {r}'s keys of request {b} "
                        f"begin at position {total}, not a multiple of chunk_keys "
                        f"{chunk_keys} (ranks own whole chunks: every rank before it "
                        "must hold a multiple of chunk_keys)")
                total += lengths[r][b]
            self.totals[b] = total
        self.base = [0]
        for b in range(batch):
            self.base.append(self.base[-1] + -(-self.totals[b] // chunk_keys))
        self.record_of = [-1] * self.base[-1]
        self.records, self.rank_first, self.owned = [], [], []
        for r in range(ranks):
            self.rank_first.append(sum(self.records))
            mine = []
            for b in range(batch):
                first = self.starts[r][b] // chunk_keys
                for c in range(first, first + -(-lengths[r][b] // chunk_keys)):
                    begin = c * chunk_keys
                    if self.visible(b, begin, begin + chunk_keys):
                        self.record_of[self.base[b] + c] = self.rank_first[r] + len(mine)
                        mine.append((b, c))
            self.records.append(len(mine))
            self.owned.append(mine)

    def visible(self, b, begin, end):
        """Whether some row of request b sees a key in [begin, end): row 0's
        window start bounds them all; the last row sees up to the last key."""
        first_position = self.totals[b] - self.rows
        left = self.window_left
        first_visible = first_position - left if 0 <= left < first_position else 0
        return end > first_visible and begin < end


def chunk_options(call, chunks, rank, b, c):
    """(begin, end, row, options) of chunk c of request b held by rank."""
    total = chunks.totals[b]
    begin = c * chunks.chunk_keys
    end = min(begin + chunks.chunk_keys, total)
    row = begin - chunks.starts[rank][b]
    o = call.options
    options = {"causal": o["causal"], "window": o["window"], "softcap": o["softcap"],
               "scale": o["scale"], "query_offsets": [total - end]}
    slopes = o["alibi_slopes"]
    if slopes is not None:
        per_batch = len(slopes.shape) == 2 and slopes.shape[0] > 1
        options["alibi_slopes"] = slopes[b] if per_batch else slopes
    mask = o["additive_mask"]
    if mask is not None:
        full = _broadcast(mask, (call.batch, call.heads, call.rows, call.local_keys))
        options["additive_mask"] = full[b:b + 1, :, :, row:row + end - begin]
    tree = o["tree_mask"]
    if tree is not None:
        tree_begin = total - tree.shape[2]
        if end > tree_begin:
            first = max(begin, tree_begin)
            at = b if tree.shape[0] > 1 else 0
            options["tree_mask"] = tree[at:at + 1, :, first - tree_begin:end - tree_begin]
    return begin, end, row, options


def compute_chunk(call, chunks, rank, b, c, record):
    """Chunk c of request b's state into record (float32 [floats])."""
    begin, end, row, options = chunk_options(call, chunks, rank, b, c)
    out_floats = call.rows * call.heads * call.dv
    lse = record[out_floats:]
    if call.paged is None:
        out = record[:out_floats].view(1, call.rows, call.heads, call.dv)
        q = take(call.q, 0, b, 1)
        if call.layout == "bhsd":
            out = out.permute(0, 2, 1, 3)
        k, v = (take(x, call.seq_axis, row, end - begin, b) for x in (call.k, call.v))
        _, chunk_lse = _api.attention(q, k, v, out=out, return_lse=True, layout=call.layout,
                                      context=call.context, **options)
    else:
        chunk_lse = _paged_chunk(call, b, row, end - begin, record[:out_floats], options)
    lse.copy_(_as_tensor(chunk_lse).reshape(-1))


def _paged_chunk(call, b, row, keys, out_floats, options):
    """A paged chunk: a one-request plan over its pages; returns its lse."""
    kv, table = call.paged
    page = kv._struct.page_size
    pages = table[b:b + 1, row // page:row // page + -(-keys // page)]
    tree = options.pop("tree_mask", None)
    tree_args = {}
    if tree is not None:
        tree_args = {"tree_bits": tree[0], "tree_num_keys": [tree.shape[2]]}
    mask = options.pop("additive_mask", None)
    if mask is not None:
        options["additive_mask"] = mask
    with Plan([0, call.rows], [keys], pages, num_heads=call.heads, kv=kv,
              context=call.context, q_dtype=call.q_dtype_name, out_dtype="float32",
              **tree_args) as plan:
        out = out_floats.view(call.rows, call.heads, call.dv)
        q = take(call.q, 0, b, 1)
        q = _arrays.bf16(q.array[0]) if isinstance(q, _arrays.bf16) else q[0]
        _, lse = attention_paged(q, kv, plan, out=out, return_lse=True, **options)
    return lse


def _as_tensor(x):
    import torch
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(_arrays.raw(x))


def compute_own(call, chunks, rank):
    """This rank's records, float32 [records, floats]."""
    import torch
    floats = call.rows * call.heads * (call.dv + 1)
    own = torch.empty((chunks.records[rank], floats), dtype=torch.float32)
    for i, (b, c) in enumerate(chunks.owned[rank]):
        compute_chunk(call, chunks, rank, b, c, own[i])
    return own


def merge(call, chunks, states, out, lse):
    """Each request's states (all ranks' records, [sink,] chunks in order)
    merged into out[b] and lse[b]."""
    import torch
    rows, heads, dv = call.rows, call.heads, call.dv
    out_floats = rows * heads * dv
    zeros = torch.zeros((1, rows, heads, dv), dtype=torch.float32)
    empty = torch.full((1, heads, rows), float("-inf"), dtype=torch.float32)
    sink = None
    if call.options["sinks"] is not None:
        values = _as_tensor(call.options["sinks"]).to(torch.float32).reshape(1, heads, 1)
        sink = values.expand(1, heads, rows).contiguous()
    for b in range(call.batch):
        count = chunks.base[b + 1] - chunks.base[b]
        parts, lses = [], []
        if sink is not None or count == 0:
            parts.append(zeros)
            lses.append(sink if sink is not None else empty)
        for c in range(count):
            record = chunks.record_of[chunks.base[b] + c]
            if record < 0:
                parts.append(zeros)
                lses.append(empty)
                continue
            parts.append(states[record, :out_floats].view(1, rows, heads, dv))
            lses.append(states[record, out_floats:].view(1, heads, rows))
        if call.layout == "bhsd":
            parts = [p.permute(0, 2, 1, 3) for p in parts]
        target = take(out, 0, b, 1)
        _, merged = _api.merge_states(parts, lses, out=target, return_lse=True,
                                      layout=call.layout, context=call.context)
        if lse is not None:
            lse[b:b + 1] = merged if _arrays.kind_of_or_none(lse) == "torch" else merged.numpy()
