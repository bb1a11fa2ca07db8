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
from sharded import (CHUNK, HEADS, TOTALS, check_reference, check_ring, paged,  # noqa: E402
                     problem, ring_problem, zigzag)
from sharded import local_part as _local_part  # noqa: E402

pytestmark = pytest.mark.skipif(not flashcpu.mpi.available(),
                                reason="mpi4py or libflashcpu_mpi is not available")


def local_part(k, v, rank, ranks):
    return _local_part(k, v, rank, ranks, flashcpu.mpi.shard)


def one_rank(q, k, v, options):
    from mpi4py import MPI
    return flashcpu.mpi.attention(q, k, v, MPI.COMM_SELF, kv_lengths=TOTALS,
                                  chunk_keys=CHUNK, return_lse=True, **options)


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
