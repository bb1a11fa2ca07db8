#!/usr/bin/env python3
"""Decode calls from a caller bound to one core: flashcpu's own pool (no
torch), llama3-8b shapes in f16, the calling thread unbound, then bound to
--cpu (a core the pool pins a worker to), then to CPU 0. Without the
runtime's caller swap, the caller and that worker would share one core.

  PYTHONPATH=python FLASHCPU_LIBRARY=build/src/libflashcpu.so.0 \\
      python3 bench/probes/caller_place_probe.py --threads 16 --cpu 5

Prints the median and the fastest of --reps calls each way (the K/V of
--layers caches in turn). Linux only (os.sched_setaffinity).
"""

import argparse
import os
import statistics
import sys
import time


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--cpu", type=int, default=5)
    parser.add_argument("--kv", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--reps", type=int, default=60)
    args = parser.parse_args(argv)
    import numpy as np
    import flashcpu

    rng = np.random.default_rng(1)
    heads, kv_heads, dim = 32, 8, 128
    q = rng.standard_normal((1, 1, heads, dim), dtype=np.float32).astype(np.float16)
    caches = [tuple(rng.standard_normal((1, args.kv, kv_heads, dim), dtype=np.float32)
                    .astype(np.float16) for _ in range(2)) for _ in range(args.layers)]
    out = np.empty_like(q)
    context = flashcpu.Context(threads=args.threads, host_openmp=False)

    def timed(reps):
        samples = []
        for i in range(reps):
            k, v = caches[i % args.layers]
            start = time.perf_counter()
            flashcpu.attention(q, k, v, causal=True, out=out, context=context)
            samples.append((time.perf_counter() - start) * 1e6)
        return statistics.median(samples), min(samples)

    timed(10)
    print("unbound    median %.1f us, fastest %.1f us" % timed(args.reps))
    for cpu in (args.cpu, 0):
        os.sched_setaffinity(0, {cpu})  # this thread only
        timed(5)
        print("on CPU %-3d median %.1f us, fastest %.1f us" % (cpu, *timed(args.reps)))
    context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
