"""Problems sharded over ranks, shared by the flashcpu.mpi and
flashcpu.distributed tests: the same inputs on every rank, each rank's part
of the keys, and the checks against the float64 reference."""

import numpy as np

import flashcpu
import reference

CHUNK = 64
TOTALS = [300, 170]
HEADS, KV_HEADS, DIM = 4, 2, 32


def problem(rows):
    """The same inputs on every rank: q, whole K/V [2, 300, Hkv, D], options."""
    rng = np.random.default_rng(rows)
    q = rng.standard_normal((2, rows, HEADS, DIM)).astype(np.float32)
    k = rng.standard_normal((2, max(TOTALS), KV_HEADS, DIM)).astype(np.float32)
    v = rng.standard_normal((2, max(TOTALS), KV_HEADS, DIM)).astype(np.float32)
    options = {"causal": True, "window": (100, 0), "softcap": 20.0,
               "sinks": rng.standard_normal(HEADS).astype(np.float32),
               "alibi_slopes": (0.05 * rng.random((2, HEADS))).astype(np.float32)}
    return q, k, v, options


def local_part(k, v, rank, ranks, shard):
    """This rank's rows of each request (balanced whole chunks of shard),
    packed."""
    ranges = [shard(total, rank, ranks, CHUNK) for total in TOTALS]
    rows = max(1, max(keys for _, keys in ranges))
    k_local = np.full((2, rows) + k.shape[2:], np.nan, np.float32)
    v_local = np.full((2, rows) + v.shape[2:], np.nan, np.float32)
    for b, (begin, keys) in enumerate(ranges):
        k_local[b, :keys] = k[b, begin:begin + keys]
        v_local[b, :keys] = v[b, begin:begin + keys]
    return k_local, v_local, [keys for _, keys in ranges]


def paged(k_local, v_local, lengths, page_size=16):
    """k_local, v_local [B, rows, Hkv, D] as a flashcpu.PagedKV whose pages
    lie in reverse order, and the block table."""
    batch = k_local.shape[0]
    per_request = max(1, -(-k_local.shape[1] // page_size))
    pages = batch * per_request
    shape = (pages, page_size) + k_local.shape[2:]
    k_pages, v_pages = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    table = np.zeros((batch, per_request), np.int32)
    for b in range(batch):
        for p in range(-(-lengths[b] // page_size)):
            page = pages - 1 - (b * per_request + p)
            table[b, p] = page
            rows = slice(p * page_size, min((p + 1) * page_size, lengths[b]))
            count = rows.stop - rows.start
            k_pages[page, :count] = k_local[b, rows]
            v_pages[page, :count] = v_local[b, rows]
    return flashcpu.PagedKV(k_pages, v_pages), table


def check_reference(out, lse, q, k, v, options):
    expected_out, expected_lse = reference.attention(
        q, k, v, kv_lengths=TOTALS, causal=options["causal"], window=options["window"],
        softcap=options["softcap"], sinks=options["sinks"], alibi=options["alibi_slopes"])
    np.testing.assert_allclose(out, expected_out, atol=3e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, expected_lse, atol=3e-4, rtol=1e-5)


def zigzag(x, rank, ranks):
    """Rank `rank`'s two blocks of a prompt-long [B, S, ...] array."""
    block = x.shape[1] // (2 * ranks)
    first, second = rank, 2 * ranks - 1 - rank
    return np.concatenate([x[:, first * block:(first + 1) * block],
                           x[:, second * block:(second + 1) * block]], axis=1)


def ring_problem(ranks, block=12):
    rng = np.random.default_rng(ranks)
    prompt = 2 * ranks * block
    q = rng.standard_normal((2, prompt, HEADS, DIM)).astype(np.float32)
    k = rng.standard_normal((2, prompt, KV_HEADS, DIM)).astype(np.float32)
    v = rng.standard_normal((2, prompt, KV_HEADS, DIM)).astype(np.float32)
    options = {"causal": True, "window": (30, 0),
               "sinks": rng.standard_normal(HEADS).astype(np.float32)}
    return q, k, v, options


def check_ring(out, lse, rank, ranks, q, k, v, options):
    expected_out, expected_lse = reference.attention(q, k, v, **options)
    np.testing.assert_allclose(out, zigzag(expected_out, rank, ranks), atol=3e-5, rtol=1e-4)
    expected_lse = zigzag(expected_lse.transpose(0, 2, 1), rank, ranks).transpose(0, 2, 1)
    np.testing.assert_allclose(lse, expected_lse, atol=3e-4, rtol=1e-5)
