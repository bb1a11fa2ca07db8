#!/usr/bin/env python3
"""Context parallelism on one host: each rank of an mpirun job pinned to its
own --threads cores, llama3-8b heads (32 query, 8 KV, head_dim 128), bf16.

  decode  one query row over --kv keys (a list), the keys sharded in whole
          chunks (flashcpu.mpi.shard); the time of flashcpu.mpi.attention
          (the slowest rank's, after a barrier); with one rank also
          flashcpu.attention on the whole cache, the one-process call.
  ring    causal prefill of --prompt rows (a list) as zigzag ring attention
          (flashcpu.mpi.ring_attention); with one rank also flashcpu.attention
          on the whole prompt (alone with --one-process-only).
  link    ping-pong between ranks 0 and 1 (8 B to 64 MiB): the transport's
          latency and bandwidth, the model's two parameters.
  cores   every rank runs the same causal prefill of --prompt rows on its
          own cores at once, no communication: each rank's median time.
          A ring's static split waits for its slowest rank; where the
          ranks' cores differ in speed (a shared or virtualised host), this
          shows by how much.

--turns N (MPI, more than one rank) adds N turns of the sharded call and of
flashcpu.attention on the whole problem in rank 0 alone on all the ranks'
cores (the others waiting without polling), in the same run: the ratio
per turn is then free of the drift between runs.

--transport gloo runs the same calls through flashcpu.distributed over a
torch.distributed gloo group (rendezvous in a file) instead of mpi4py.
Prints one JSON object per case on rank 0.

  mpirun -np 4 --bind-to none python3 tools/mpi_bench.py --threads 4 \\
      --case decode --kv 131072,524288
  mpirun -np 1 --bind-to none python3 tools/mpi_bench.py --threads 16 --case ring

Needs mpi4py and libflashcpu_mpi (FLASHCPU_MPI_LIBRARY) with the package
(this checkout's python/ unless flashcpu imports), and FLASHCPU_LIBRARY.
"""

import argparse
import json
import os
import statistics
import sys
import time

HEADS, KV_HEADS, DIM = 32, 8, 128


def pin(rank, threads):
    """This rank to cores [rank * threads, (rank + 1) * threads); returns
    (all cores, this rank's)."""
    cores = sorted(os.sched_getaffinity(0))
    mine = cores[rank * threads:(rank + 1) * threads]
    if len(mine) < threads:
        raise SystemExit(f"rank {rank}: {threads} cores wanted, {len(cores)} in all")
    os.sched_setaffinity(0, mine)
    return cores, mine


def bf16_rows(rows, heads, seed):
    """[1, rows, heads, DIM] bf16 bits (numpy uint16), values about N(0, 1):
    a random block repeated (the values do not change the time)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal((min(rows, 4096), heads, DIM)).astype(np.float32)
             .view(np.uint32) >> 16).astype(np.uint16)
    reps = -(-rows // block.shape[0])
    return np.ascontiguousarray(np.tile(block, (reps, 1, 1))[:rows])[None]


class Mpi:
    def __init__(self):
        from mpi4py import MPI
        import flashcpu.mpi
        self.MPI, self.comm, self.module = MPI, MPI.COMM_WORLD, flashcpu.mpi
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def barrier(self):
        self.comm.Barrier()

    def slowest(self, seconds):
        return self.comm.allreduce(seconds, op=self.MPI.MAX)

    def attention(self, *args, **kwargs):
        return self.module.attention(*args, self.comm, **kwargs)

    def ring(self, *args, **kwargs):
        return self.module.ring_attention(*args, self.comm, **kwargs)

    def gather(self, value):
        return self.comm.gather(value, root=0)


class Gloo:
    def __init__(self, store):
        import torch
        import torch.distributed as dist
        import flashcpu.distributed
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
        size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=size)
        self.torch, self.dist, self.module = torch, dist, flashcpu.distributed
        self.rank, self.size = rank, size

    def barrier(self):
        self.dist.barrier()

    def slowest(self, seconds):
        t = self.torch.tensor([seconds], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])

    def attention(self, *args, **kwargs):
        return self.module.attention(*args, **kwargs)

    def ring(self, *args, **kwargs):
        return self.module.ring_attention(*args, **kwargs)

    def gather(self, value):
        values = [None] * self.size
        self.dist.all_gather_object(values, value)
        return values if self.rank == 0 else None


def timed(group, reps, call, warm=True):
    """Medians, min and max of the slowest rank's time (ms) over reps calls."""
    if warm:  # pages touched, pools started (a long call needs none)
        call()
    times = []
    for _ in range(reps):
        group.barrier()
        start = time.perf_counter()
        call()
        times.append(group.slowest(time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


class Turns:
    """--turns: the sharded call and one process on all the group's cores,
    in turns within one mpirun, so that both see the same host state (a
    core's AMX and memory rates drift between runs). During rank 0's turn
    the other ranks wait without polling, leaving it their cores."""

    def __init__(self, group, args, flashcpu):
        self.group, self.count = group, args.turns
        self.cores, self.mine = args.cores, args.mine
        self.context = None
        if group.rank == 0 and self.count:
            os.sched_setaffinity(0, self.cores)  # the pool's threads over every core
            self.context = flashcpu.Context(threads=group.size * args.threads,
                                            host_openmp=False)
            os.sched_setaffinity(0, self.mine)

    def one_process(self, reps, call):
        """rank 0's median (ms) of reps calls on every core; None elsewhere."""
        comm = self.group.comm
        if self.group.rank != 0:
            request = comm.Ibarrier()
            while not request.Test():
                time.sleep(0.002)
            return None
        os.sched_setaffinity(0, self.cores)
        call()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e3)
        os.sched_setaffinity(0, self.mine)
        comm.Ibarrier().Wait()
        return statistics.median(times)

    def run(self, row, reps, sharded, whole):
        """Adds "turns": per turn the sharded median and one process's."""
        if not self.count or self.group.size == 1:
            return
        calls = whole() if self.group.rank == 0 else None
        turns = []
        for _ in range(self.count):
            sharded_ms = timed(self.group, reps, sharded, False)["median_ms"]
            alone_ms = self.one_process(reps, calls)
            turns.append({"sharded_ms": sharded_ms, "one_process_ms": alone_ms,
                          "ratio": sharded_ms / alone_ms if alone_ms else None})
        row["turns"] = turns


def decode(group, args, flashcpu, context):
    for kv in args.kv:
        begin, keys = group.module.shard(kv, group.rank, group.size, args.chunk_keys)
        q = flashcpu.bf16(bf16_rows(1, HEADS, 1))
        k = flashcpu.bf16(bf16_rows(max(keys, 1), KV_HEADS, 2 + begin))
        v = flashcpu.bf16(bf16_rows(max(keys, 1), KV_HEADS, 3 + begin))
        row = {"case": "decode", "kv": kv, "ranks": group.size, "threads": args.threads,
               "transport": args.transport, "chunk_keys": args.chunk_keys,
               "read_bytes": 2 * kv * KV_HEADS * DIM * 2}
        row.update(timed(group, args.reps, lambda: group.attention(
            q, k, v, kv_lengths=[keys], chunk_keys=args.chunk_keys, context=context)))
        if group.size == 1:
            row["one_process"] = timed(group, args.reps, lambda: flashcpu.attention(
                q, k, v, context=context))

        def whole():
            k_all = flashcpu.bf16(bf16_rows(kv, KV_HEADS, 2))
            v_all = flashcpu.bf16(bf16_rows(kv, KV_HEADS, 3))
            return lambda: flashcpu.attention(q, k_all, v_all, context=args.turns_ctx.context)
        args.turns_ctx.run(row, args.reps, lambda: group.attention(
            q, k, v, kv_lengths=[keys], chunk_keys=args.chunk_keys, context=context), whole)
        yield row


def ring(group, args, flashcpu, context):
    import numpy as np
    n = group.size
    for prompt in args.prompt:
        block = prompt // (2 * n)
        mine = (group.rank, 2 * n - 1 - group.rank)

        def rows(heads, seed):
            whole = bf16_rows(2 * block, heads, seed)  # this rank's two blocks
            return flashcpu.bf16(np.ascontiguousarray(whole))
        q, k, v = rows(HEADS, 10 + mine[0]), rows(KV_HEADS, 20 + mine[0]), \
            rows(KV_HEADS, 30 + mine[0])
        flops = 2 * 2 * HEADS * DIM * prompt * (prompt + 1) / 2  # causal QK^T and PV
        row = {"case": "ring", "prompt": prompt, "ranks": n, "threads": args.threads,
               "transport": args.transport, "flops": flops}
        warm = prompt < 65536
        if not args.one_process_only:
            row.update(timed(group, args.ring_reps, lambda: group.ring(
                q, k, v, causal=True, context=context), warm))
        if n == 1:
            row["one_process"] = timed(group, args.ring_reps, lambda: flashcpu.attention(
                q, k, v, causal=True, context=context), warm)

        def whole():
            q_all, k_all, v_all = (flashcpu.bf16(bf16_rows(prompt, heads, seed))
                                   for heads, seed in ((HEADS, 10), (KV_HEADS, 20),
                                                       (KV_HEADS, 30)))
            return lambda: flashcpu.attention(q_all, k_all, v_all, causal=True,
                                              context=args.turns_ctx.context)
        args.turns_ctx.run(row, args.ring_reps, lambda: group.ring(
            q, k, v, causal=True, context=context), whole)
        yield row


def cores(group, args, flashcpu, context):
    """The same causal prefill on every rank's cores at once."""
    for prompt in args.prompt:
        q, k, v = (flashcpu.bf16(bf16_rows(prompt, heads, seed))
                   for heads, seed in ((HEADS, 10), (KV_HEADS, 20), (KV_HEADS, 30)))
        flashcpu.attention(q, k, v, causal=True, context=context)  # warm
        times = []
        for _ in range(args.ring_reps):
            group.barrier()
            start = time.perf_counter()
            flashcpu.attention(q, k, v, causal=True, context=context)
            times.append((time.perf_counter() - start) * 1e3)
        each = group.gather(statistics.median(times))
        if group.rank == 0:
            yield {"case": "cores", "prompt": prompt, "ranks": group.size,
                   "threads": args.threads, "rank_ms": each,
                   "slowest_over_fastest": max(each) / min(each)}


def ping_pong(comm, rank, buffer, reps):
    """reps round trips of buffer between ranks 0 and 1."""
    for _ in range(reps):
        if rank == 0:
            comm.Send(buffer, dest=1)
            comm.Recv(buffer, source=1)
        elif rank == 1:
            comm.Recv(buffer, source=0)
            comm.Send(buffer, dest=0)


def link(group, args):
    """Ping-pong 0 <-> 1: half the round trip per message size."""
    import numpy as np
    if group.size < 2 or args.transport != "mpi":
        return
    comm = group.comm
    for size in (8, 4096, 1 << 20, 16 << 20, 64 << 20):
        buffer = np.zeros(size, np.uint8)
        reps = 200 if size <= 4096 else 20
        ping_pong(comm, group.rank, buffer, 2)  # the connection and the buffers set up first
        comm.Barrier()
        start = time.perf_counter()
        ping_pong(comm, group.rank, buffer, reps)
        one_way = (time.perf_counter() - start) / reps / 2
        yield {"case": "link", "bytes": size, "one_way_us": one_way * 1e6,
               "gb_per_s": size / one_way / 1e9}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="cores per rank")
    parser.add_argument("--case", choices=("decode", "ring", "link", "cores"),
                        default="decode")
    parser.add_argument("--kv", default="131072,524288,1048576")
    parser.add_argument("--prompt", default="32768")
    parser.add_argument("--chunk-keys", type=int, default=16384)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--ring-reps", type=int, default=3)
    parser.add_argument("--one-process-only", action="store_true",
                        help="ring with one rank: time flashcpu.attention alone")
    parser.add_argument("--transport", choices=("mpi", "gloo"), default="mpi")
    parser.add_argument("--turns", type=int, default=0,
                        help="MPI, more than one rank: N turns of the sharded call and one "
                             "process on all the ranks' cores, in the same run")
    parser.add_argument("--store", default="/tmp/flashcpu-mpi-bench-store")
    args = parser.parse_args()
    args.kv = [int(x) for x in args.kv.split(",")]
    args.prompt = [int(x) for x in args.prompt.split(",")]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    args.cores, args.mine = pin(rank, args.threads)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "python"))
    import flashcpu
    group = Mpi() if args.transport == "mpi" else Gloo(args.store)
    context = flashcpu.Context(threads=args.threads)
    if args.turns and args.transport != "mpi":
        raise SystemExit("--turns: MPI only")
    args.turns_ctx = Turns(group, args, flashcpu)
    cases = {"decode": lambda: decode(group, args, flashcpu, context),
             "ring": lambda: ring(group, args, flashcpu, context),
             "link": lambda: link(group, args),
             "cores": lambda: cores(group, args, flashcpu, context)}[args.case]()
    for row in cases:
        if group.rank == 0:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
