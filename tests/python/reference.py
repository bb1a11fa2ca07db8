"""A float64 numpy reference of flashcpu_attention's semantics
(include/flashcpu/flashcpu.h), for the Python tests."""

import numpy as np


def attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None,
              kv_lengths=None, additive=None, tree=None):
    """q [B, L, Hq, D], k [B, S, Hkv, D], v [B, S, Hkv, Dv] as float64;
    additive broadcastable to [B, Hq, L, S]; tree bool [B or 1, L, keys].
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
            for r in range(rows):
                row = scores[r]
                if not np.isfinite(row).any():
                    continue
                top = row.max()
                weights = np.exp(row - top)
                total = weights.sum()
                out[b, r, h] = weights @ v[b, :length, h // group] / total
                lse[b, h, r] = top + np.log(total)
    return out, lse


def bf16_to_f32(bits):
    """uint16 bfloat16 bits as float32."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """float32 as uint16 bfloat16 bits, rounded to nearest even."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)
