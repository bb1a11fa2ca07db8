"""A float64 numpy reference of flashcpu_attention's semantics
(include/flashcpu/flashcpu.h), for the Python tests."""

import numpy as np


def attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None,
              kv_lengths=None, additive=None, tree=None, sinks=None, alibi=None):
    """q [B, L, Hq, D], k [B, S, Hkv, D], v [B, S, Hkv, Dv] as float64;
    additive broadcastable to [B, Hq, L, S]; tree bool [B or 1, L, keys];
    sinks [Hq] (one more key of that score and a zero value); alibi slopes
    [Hq] or [B, Hq] (bias -slope * |p - j|, with the additive mask).
    Returns out [B, L, Hq, Dv] and lse [B, Hq, L]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, rows, heads, dim = q.shape
    keys, kv_heads, dv = k.shape[1], k.shape[2], v.shape[3]
    group = heads // kv_heads
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    out = np.zeros((batch, rows, heads, dv))
    lse = np.full((batch, heads, rows), -np.inf)
    if additive is not None:
        additive = np.broadcast_to(np.asarray(additive, dtype=np.float64),
                                   (batch, heads, rows, keys))
    if alibi is not None:
        alibi = np.broadcast_to(np.asarray(alibi, dtype=np.float64).reshape(-1, heads),
                                (batch, heads))
    for b in range(batch):
        length = keys if kv_lengths is None else int(kv_lengths[b])
        for h in range(heads):
            scores = q[b, :, h] @ k[b, :length, h // group].T * scale
            if softcap:
                scores = softcap * np.tanh(scores / softcap)
            if additive is not None:
                scores = scores + additive[b, h, :, :length]
            i = np.arange(rows)[:, None]
            j = np.arange(length)[None, :]
            position = i + (length - rows)
            if alibi is not None:
                scores = scores - alibi[b, h] * np.abs(position - j)
            visible = np.ones((rows, length), dtype=bool)
            if causal:
                visible &= j <= position
            if window[0] >= 0:
                visible &= j >= position - window[0]
            if window[1] >= 0:
                visible &= j <= position + window[1]
            if tree is not None:
                tree_keys = tree.shape[2]
                begin = length - tree_keys
                allowed = np.ones((rows, length), dtype=bool)
                allowed[:, begin:] = tree[0 if tree.shape[0] == 1 else b, :rows]
                visible &= allowed
            scores = np.where(visible, scores, -np.inf)
            sink = None if sinks is None else float(sinks[h])
            for r in range(rows):
                row = scores[r]
                if not np.isfinite(row).any():
                    if sink is not None:
                        lse[b, h, r] = sink
                    continue
                top = row.max() if sink is None else max(row.max(), sink)
                weights = np.exp(row - top)
                total = weights.sum() + (0.0 if sink is None else np.exp(sink - top))
                out[b, r, h] = weights @ v[b, :length, h // group] / total
                lse[b, h, r] = top + np.log(total)
    return out, lse


def gather_pages(cache, layout, pages, length, dtype=np.float64):
    """The first length tokens [length, Hkv, D] of a request whose pages are
    `pages`, from a cache [num_pages, page_size, Hkv, D] ("nhd") or
    [num_pages, Hkv, page_size, D] ("hnd"); in dtype (None: the cache's)."""
    cache = np.asarray(cache, dtype=dtype)
    if layout == "hnd":
        cache = cache.transpose(0, 2, 1, 3)
    page_size = cache.shape[1]
    used = -(-length // page_size)
    tokens = cache[np.asarray(pages[:used], dtype=np.int64)].reshape(
        (used * page_size,) + cache.shape[2:])
    return tokens[:length]


def paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens_kv, block_table, *,
                    layout="nhd", block_offsets=None, tree=None, tree_num_keys=None,
                    additive=None, alibi=None, **options):
    """flashcpu_attention_paged's semantics: q [T, Hq, D] packed rows, each
    request r (rows cu_seqlens_q[r] .. cu_seqlens_q[r+1] - 1) attending to
    its seq_lens_kv[r] keys gathered from its pages; tree bool [T, keys]
    with tree_num_keys [R]; additive broadcastable to [R, Hq, T, max S_r];
    alibi [Hq] or [R, Hq]; the other options as attention(). Returns out
    [T, Hq, Dv] and lse [Hq, T]."""
    q = np.asarray(q, dtype=np.float64)
    tokens, heads = q.shape[0], q.shape[1]
    dv = v_cache.shape[3]
    requests = len(seq_lens_kv)
    out = np.zeros((tokens, heads, dv))
    lse = np.full((heads, tokens), -np.inf)
    max_keys = max([int(s) for s in seq_lens_kv] + [0])
    if additive is not None:
        additive = np.broadcast_to(np.asarray(additive, dtype=np.float64),
                                   (requests, heads, tokens, max_keys))
    if alibi is not None:
        alibi = np.broadcast_to(np.asarray(alibi, dtype=np.float64).reshape(-1, heads),
                                (requests, heads))
    for r in range(requests):
        begin, end, keys = int(cu_seqlens_q[r]), int(cu_seqlens_q[r + 1]), int(seq_lens_kv[r])
        if end == begin:
            continue
        if block_offsets is None:
            pages = block_table[r]
        else:
            pages = block_table[int(block_offsets[r]):int(block_offsets[r + 1])]
        k = gather_pages(k_cache, layout, pages, keys)
        v = gather_pages(v_cache, layout, pages, keys)
        request = dict(options)
        if additive is not None:
            request["additive"] = additive[r:r + 1, :, begin:end, :keys]
        if alibi is not None:
            request["alibi"] = alibi[r]
        if tree is not None and int(tree_num_keys[r]) > 0:
            request["tree"] = np.asarray(tree)[None, begin:end, :int(tree_num_keys[r])]
        o, row_lse = attention(q[None, begin:end], k[None], v[None], **request)
        out[begin:end] = o[0]
        lse[:, begin:end] = row_lse[0]
    return out, lse


def bf16_to_f32(bits):
    """uint16 bfloat16 bits as float32."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """float32 as uint16 bfloat16 bits, rounded to nearest even."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)
