"""flashcpu.distributed (context parallelism over torch.distributed gloo):
groups of 1 to 4 processes on this machine (this file run as each rank's
program: `python3 test_distributed.py --rank R --ranks N --store FILE`),
where every rank checks its result's bytes against the same call on a
group of its own, against flashcpu.mpi's bytes where that loads, and
against the float64 reference; bad input and ranks that disagree raise the
same error on every rank; a rank that never calls ends in an error, not a
hang. Skipped where torch or its gloo backend is missing."""

import datetime
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":  # a rank: the conftest's set-up
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    sys.path.insert(0, HERE)
    if not os.environ.get("FLASHCPU_LIBRARY"):
        os.environ["FLASHCPU_LIBRARY"] = os.path.join(
            os.path.dirname(os.path.dirname(HERE)), "build", "src", "libflashcpu.so")

import flashcpu  # noqa: E402
import flashcpu.distributed as cp  # noqa: E402
import flashcpu.mpi  # noqa: E402
from sharded import (CHUNK, TOTALS, check_reference, check_ring, local_part,  # noqa: E402
                     paged, problem, ring_problem, zigzag)


def _gloo():
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


pytestmark = pytest.mark.skipif(not _gloo(), reason="torch with its gloo backend is missing")


def test_shard_is_the_mpi_rule():
    assert [cp.shard(950, r, 4, 100) for r in range(4)] == [
        (0, 300), (300, 300), (600, 200), (800, 150)]
    assert cp.shard(5, 1, 3, 4) == (4, 1) and cp.shard(5, 2, 3, 4) == (5, 0)
    with pytest.raises(flashcpu.InvalidArgumentError):
        cp.shard(10, 3, 2, 4)
    if flashcpu.mpi.available():
        for total, ranks, chunk in ((950, 4, 100), (7, 3, 2), (0, 2, 8), (16384 * 3, 2, 0)):
            for r in range(ranks):
                assert cp.shard(total, r, ranks, chunk) == flashcpu.mpi.shard(
                    total, r, ranks, chunk)


def test_without_a_process_group():
    q, k, v, _ = problem(1)
    with pytest.raises(flashcpu.InvalidArgumentError, match="not initialized"):
        cp.attention(q, k, v)


def run_ranks(ranks, mode="checks", timeout=240):
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r),
                                   "--ranks", str(ranks), "--store", store, "--mode", mode],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env) for r in range(ranks)]
        outputs = []
        for p in procs:
            try:
                outputs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                for other in procs:
                    other.kill()
                raise
        return [p.returncode for p in procs], outputs


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_group_of(ranks):
    codes, outputs = run_ranks(ranks)
    assert codes == [0] * ranks, "\n".join(outputs)
    assert sum(o.count("flashcpu.distributed ranks: ok") for o in outputs) == ranks


def test_a_rank_that_never_calls_is_an_error_not_a_hang():
    codes, outputs = run_ranks(2, mode="absent", timeout=120)
    assert codes == [0, 0], "\n".join(outputs)
    assert "raised as expected" in outputs[0], outputs[0]


def as_torch(x):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x))


def run_checks(rank, ranks, groups):
    """Each rank's checks; raises on a failure (exit 1)."""
    import torch
    context = flashcpu.Context(threads=1)
    alone_group = groups[rank]
    for rows in (1, 5):
        q, k, v, options = problem(rows)
        k_local, v_local, lengths = local_part(k, v, rank, ranks, cp.shard)
        out, lse = cp.attention(q, k_local, v_local, kv_lengths=lengths, chunk_keys=CHUNK,
                                return_lse=True, context=context, **options)
        alone, alone_lse = cp.attention(q, k, v, alone_group, kv_lengths=TOTALS,
                                        chunk_keys=CHUNK, return_lse=True, context=context,
                                        **options)
        assert out.tobytes() == alone.tobytes(), f"rank {rank}: out's bytes differ"
        assert lse.tobytes() == alone_lse.tobytes(), f"rank {rank}: lse's bytes differ"
        check_reference(out, lse, q, k, v, options)
        if flashcpu.mpi.available():
            from mpi4py import MPI
            by_mpi, mpi_lse = flashcpu.mpi.attention(
                q, k, v, MPI.COMM_SELF, kv_lengths=TOTALS, chunk_keys=CHUNK, return_lse=True,
                context=context, **options)
            assert out.tobytes() == by_mpi.tobytes(), "not flashcpu.mpi's bytes"
            assert lse.tobytes() == mpi_lse.tobytes(), "not flashcpu.mpi's lse bytes"
        # torch tensors, one thread count or another: the same bytes.
        tensors = cp.attention(as_torch(q), as_torch(k_local), as_torch(v_local),
                               kv_lengths=lengths, chunk_keys=CHUNK,
                               context=flashcpu.Context(threads=2), **options)
        assert isinstance(tensors, torch.Tensor) and tensors.numpy().tobytes() == alone.tobytes()
        kv, table = paged(k_local, v_local, lengths)
        from_pages = cp.attention_paged(q, kv, table, lengths, chunk_keys=CHUNK,
                                        context=context, **options)
        assert from_pages.tobytes() == alone.tobytes(), f"rank {rank}: paged bytes differ"
        received = cp.attention(q, k_local, v_local, kv_lengths=lengths, chunk_keys=CHUNK,
                                root=ranks - 1, context=context, **options)
        assert (received is None) == (rank != ranks - 1)
        if received is not None:
            assert received.tobytes() == alone.tobytes()
    # A tree mask over the newest keys and an additive mask on this rank's keys.
    q, k, v, _ = problem(3)
    k_local, v_local, lengths = local_part(k, v, rank, ranks, cp.shard)
    rng = np.random.default_rng(7)
    tree = rng.random((2, 3, 70)) < 0.6
    tree[:, :, -1] = True
    mask = np.where(rng.random((2, 1, 3, max(TOTALS))) < 0.2, -np.inf, 0.5).astype(np.float32)
    starts = [cp.shard(t, rank, ranks, CHUNK)[0] for t in TOTALS]
    local_mask = np.zeros((2, 1, 3, k_local.shape[1]), np.float32)
    for b, (begin, n) in enumerate(zip(starts, lengths)):
        local_mask[b, :, :, :n] = mask[b, :, :, begin:begin + n]
    out = cp.attention(q, k_local, v_local, kv_lengths=lengths, chunk_keys=CHUNK,
                       tree_mask=tree, additive_mask=local_mask, context=context)
    alone = cp.attention(q, k, v, alone_group, kv_lengths=TOTALS, chunk_keys=CHUNK,
                         tree_mask=tree, additive_mask=mask, context=context)
    assert out.tobytes() == alone.tobytes(), f"rank {rank}: masked bytes differ"
    whole = flashcpu.attention(q, k, v, kv_lengths=TOTALS, tree_mask=tree, additive_mask=mask)
    np.testing.assert_allclose(out, whole, atol=3e-5, rtol=1e-4)
    # Ring prefill.
    q, k, v, options = ring_problem(ranks)
    out, lse = cp.ring_attention(zigzag(q, rank, ranks), zigzag(k, rank, ranks),
                                 zigzag(v, rank, ranks), return_lse=True, context=context,
                                 **options)
    check_ring(out, lse, rank, ranks, q, k, v, options)
    check_errors(rank, ranks, context)


def expect(error_type, text, call):
    try:
        call()
    except error_type as error:
        assert text in str(error), str(error)
    else:
        raise AssertionError(f"no {error_type.__name__} ({text})")


def check_errors(rank, ranks, context):
    """Bad input on one rank, or ranks that disagree: the same error on all."""
    q, k, v, options = problem(2)
    k_local, v_local, lengths = local_part(k, v, rank, ranks, cp.shard)
    if ranks > 1:
        disagreeing = dict(options, causal=rank != 0)
        expect(flashcpu.InvalidArgumentError, "the ranks disagree on causal",
               lambda: cp.attention(q, k_local, v_local, kv_lengths=lengths,
                                    chunk_keys=CHUNK, context=context, **disagreeing))
        expect(flashcpu.InvalidArgumentError, "not a multiple of chunk_keys",
               lambda: cp.attention(q, k_local, v_local, kv_lengths=lengths,
                                    chunk_keys=3 * CHUNK // 2, context=context, **options))
    bad = list(lengths)
    if rank == ranks - 1:
        bad[1] = k_local.shape[1] + 1
    expect(flashcpu.InvalidArgumentError, f"rank {ranks - 1}: kv_lengths[1]",
           lambda: cp.attention(q, k_local, v_local, kv_lengths=bad, chunk_keys=CHUNK,
                                context=context, **options))
    expect(flashcpu.InvalidArgumentError, f"rank 0: root is {ranks}",
           lambda: cp.attention(q, k_local, v_local, kv_lengths=lengths, chunk_keys=CHUNK,
                                root=ranks, context=context))
    expect(flashcpu.ShapeMismatchError, "do not fit together",
           lambda: cp.attention(q, k_local[..., :16], v_local, kv_lengths=lengths,
                                context=context))
    kv, table = paged(k_local, v_local, lengths)
    expect(flashcpu.InvalidArgumentError, "rank 0: chunk_keys 40 is not a multiple of the page",
           lambda: cp.attention_paged(q, kv, table, lengths, chunk_keys=40, context=context))


groups_of_one = []


def main(argv):
    import torch.distributed as dist
    rank, ranks = int(argv[argv.index("--rank") + 1]), int(argv[argv.index("--ranks") + 1])
    store, mode = argv[argv.index("--store") + 1], argv[argv.index("--mode") + 1]
    timeout = datetime.timedelta(seconds=10 if mode == "absent" else 120)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=ranks, timeout=timeout)
    groups_of_one.extend(dist.new_group([r]) for r in range(ranks))
    if mode == "absent":
        if rank == 0:
            q, k, v, _ = problem(1)
            try:
                cp.attention(q, k, v, chunk_keys=CHUNK)
            except RuntimeError as error:
                print(f"raised as expected: {type(error).__name__}", flush=True)
            else:
                raise AssertionError("a call with a rank missing returned")
        return
    run_checks(rank, ranks, groups_of_one)
    dist.barrier()
    print(f"flashcpu.distributed ranks: ok (rank {rank} of {ranks})", flush=True)


if __name__ == "__main__" and "--rank" in sys.argv:
    main(sys.argv)
