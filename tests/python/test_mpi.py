"""flashcpu.mpi (libflashcpu_mpi over mpi4py): in this process on a
communicator of one, against the float64 reference and flashcpu.attention;
and under mpirun with 2 to 4 ranks (this file run as the ranks' program:
`python3 test_mpi.py --ranks`), where every rank checks its result's bytes
against the same call on a communicator of one and the reference, and that
bad input raises the same error on every rank. Skipped where mpi4py or
libflashcpu_mpi is missing."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":  # a rank under mpirun: the conftest's set-up
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    sys.path.insert(0, HERE)

import flashcpu  # noqa: E402
import flashcpu.mpi  # noqa: E402
import reference  # noqa: E402

pytestmark = pytest.mark.skipif(not flashcpu.mpi.available(),
                                reason="mpi4py or libflashcpu_mpi is not available")

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


def local_part(k, v, rank, ranks):
    """This rank's rows of each request (balanced whole chunks), packed."""
    ranges = [flashcpu.mpi.shard(total, rank, ranks, CHUNK) for total in TOTALS]
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


def one_rank(q, k, v, options):
    from mpi4py import MPI
    return flashcpu.mpi.attention(q, k, v, MPI.COMM_SELF, kv_lengths=TOTALS,
                                  chunk_keys=CHUNK, return_lse=True, **options)


def check_reference(out, lse, q, k, v, options):
    expected_out, expected_lse = reference.attention(
        q, k, v, kv_lengths=TOTALS, causal=options["causal"], window=options["window"],
        softcap=options["softcap"], sinks=options["sinks"], alibi=options["alibi_slopes"])
    np.testing.assert_allclose(out, expected_out, atol=3e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, expected_lse, atol=3e-4, rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 4, 20])
def test_one_rank_matches_reference(rows):
    q, k, v, options = problem(rows)
    out, lse = one_rank(q, k, v, options)
    assert out.dtype == np.float32 and out.shape == q.shape
    check_reference(out, lse, q, k, v, options)


def test_one_chunk_gives_flashcpu_attentions_bytes():
    from mpi4py import MPI
    q, k, v, _ = problem(3)
    options = {"causal": True, "window": (50, 0), "alibi_slopes": np.full(HEADS, 0.1,
                                                                          np.float32)}
    single = flashcpu.attention(q[:1], k[:1], v[:1], **options)
    sharded = flashcpu.mpi.attention(q[:1], k[:1], v[:1], MPI.COMM_SELF, chunk_keys=512,
                                     **options)
    assert single.tobytes() == sharded.tobytes()


def test_root_receives_and_bad_input_raises():
    from mpi4py import MPI
    q, k, v, options = problem(2)
    out = flashcpu.mpi.attention(q, k, v, MPI.COMM_SELF, kv_lengths=TOTALS, root=0,
                                 chunk_keys=CHUNK, **options)
    assert out is not None
    with pytest.raises(flashcpu.InvalidArgumentError, match="kv_lengths\\[1\\] is 301"):
        flashcpu.mpi.attention(q, k, v, MPI.COMM_SELF, kv_lengths=[300, 301])
    with pytest.raises(flashcpu.ShapeMismatchError, match="do not fit together"):
        flashcpu.mpi.attention(q, k[..., :16], v, MPI.COMM_SELF)
    with pytest.raises(flashcpu.InvalidArgumentError, match="options->root is 1"):
        flashcpu.mpi.attention(q, k, v, MPI.COMM_SELF, root=1)


def test_paged_gives_the_contiguous_bytes():
    from mpi4py import MPI
    q, k, v, options = problem(3)
    kv, table = paged(k, v, TOTALS)
    out, lse = flashcpu.mpi.attention_paged(q, kv, table, TOTALS, MPI.COMM_SELF,
                                            chunk_keys=CHUNK, return_lse=True, **options)
    alone, alone_lse = one_rank(q, k, v, options)
    assert out.tobytes() == alone.tobytes() and lse.tobytes() == alone_lse.tobytes()
    with pytest.raises(flashcpu.InvalidArgumentError, match="not a multiple of the page"):
        flashcpu.mpi.attention_paged(q, kv, table, TOTALS, MPI.COMM_SELF, chunk_keys=40)


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


def test_ring_on_one_rank():
    from mpi4py import MPI
    q, k, v, options = ring_problem(1)
    out, lse = flashcpu.mpi.ring_attention(q, k, v, MPI.COMM_SELF, return_lse=True,
                                           **options)
    check_ring(out, lse, 0, 1, q, k, v, options)


def test_shard():
    assert [flashcpu.mpi.shard(950, r, 4, 100) for r in range(4)] == [
        (0, 300), (300, 300), (600, 200), (800, 150)]
    with pytest.raises(flashcpu.InvalidArgumentError):
        flashcpu.mpi.shard(10, 3, 2, 4)


def mpirun_command(ranks):
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        pytest.skip("no mpirun")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    flags = []
    if "Open MPI" in version.stdout + version.stderr:
        flags = ["--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
    return [mpirun, "-np", str(ranks)] + flags + [sys.executable, os.path.abspath(__file__),
                                                  "--ranks"]


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_under_mpirun(ranks):
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    done = subprocess.run(mpirun_command(ranks), capture_output=True, text=True,
                          timeout=180, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("flashcpu.mpi ranks: ok") == ranks, done.stdout


def run_as_rank():
    """Each rank's checks under mpirun; raises on a failure (exit 1)."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    context = flashcpu.Context(threads=1)
    for rows in (1, 5):
        q, k, v, options = problem(rows)
        k_local, v_local, lengths = local_part(k, v, rank, ranks)
        out, lse = flashcpu.mpi.attention(q, k_local, v_local, comm, kv_lengths=lengths,
                                          chunk_keys=CHUNK, return_lse=True,
                                          context=context, **options)
        alone, alone_lse = one_rank(q, k, v, options)
        assert out.tobytes() == alone.tobytes(), f"rank {rank}: out's bytes differ"
        assert lse.tobytes() == alone_lse.tobytes(), f"rank {rank}: lse's bytes differ"
        check_reference(out, lse, q, k, v, options)
        kv, table = paged(k_local, v_local, lengths)
        from_pages = flashcpu.mpi.attention_paged(q, kv, table, lengths, comm,
                                                  chunk_keys=CHUNK, context=context,
                                                  **options)
        assert from_pages.tobytes() == alone.tobytes(), f"rank {rank}: paged bytes differ"
        received = flashcpu.mpi.attention(q, k_local, v_local, comm, kv_lengths=lengths,
                                          chunk_keys=CHUNK, root=ranks - 1,
                                          context=context, **options)
        assert (received is None) == (rank != ranks - 1)
        if received is not None:
            assert received.tobytes() == alone.tobytes()
    q, k, v, options = ring_problem(ranks)
    out, lse = flashcpu.mpi.ring_attention(
        zigzag(q, rank, ranks), zigzag(k, rank, ranks), zigzag(v, rank, ranks), comm,
        return_lse=True, context=context, **options)
    check_ring(out, lse, rank, ranks, q, k, v, options)
    # Ranks disagreeing on an option: the same error on every rank.
    q, k, v, options = problem(2)
    k_local, v_local, lengths = local_part(k, v, rank, ranks)
    options["causal"] = rank != 0
    try:
        flashcpu.mpi.attention(q, k_local, v_local, comm, kv_lengths=lengths,
                               chunk_keys=CHUNK, **options)
    except flashcpu.InvalidArgumentError as error:
        assert "disagree on params->flags" in str(error), str(error)
    else:
        raise AssertionError(f"rank {rank}: no error for ranks that disagree")
    print(f"flashcpu.mpi ranks: ok (rank {rank} of {ranks})", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--ranks"]:
    run_as_rank()
