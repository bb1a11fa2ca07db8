#!/usr/bin/env python3
"""Prefill, flashcpu against PyTorch's scaled_dot_product_attention, the two
in turns in one process: --rows new query rows attend to --prefix cached
keys plus themselves (bottom-right causal; --prefix 0 is the whole prompt,
L = S), the step a serving engine runs for a prompt or a chunk of one.
llama3-8b heads (32 query, 8 KV, head_dim 128), the same tensors for both;
torch gets its [B, H, S, D] layout, is_causal where L = S and a boolean mask
otherwise.

  PYTHONPATH=python FLASHCPU_LIBRARY=build/src/libflashcpu.so.0 \\
      python3 tools/chunked_prefill_compare.py --threads 1,all
  ... --rows 4096 --prefix 0 --dtype bf16,f32    # the whole 4K prompt

After a warm-up call of each, the two alternate call by call (--reps
calls each), so that a host whose speed drifts slows both alike. Prints
each side's median (min, max), torch's median over flashcpu's, the median
of the per-turn ratios, and each output's largest error against a
reference that torch computes in a wider type (f32 for bf16, f64 for f32).
"""

import argparse
import os
import statistics
import sys
import time


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--prefix", type=int, default=4096)
    parser.add_argument("--dtype", default="bf16",
                        help="comma-separated: bf16, f32 (default bf16)")
    parser.add_argument("--threads", default="1,all",
                        help="comma-separated counts, 'all' for os.cpu_count()")
    parser.add_argument("--reps", type=int, default=7)
    return parser.parse_args(argv)


def in_turns(ours, theirs, reps):
    """Times of reps calls of each, alternating after one warm-up of each:
    (our ms, their ms, the last result of theirs)."""
    ours()
    result = theirs()
    our_ms, their_ms = [], []
    for _ in range(reps):
        start = time.perf_counter()
        ours()
        our_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        result = theirs()
        their_ms.append((time.perf_counter() - start) * 1e3)
    return our_ms, their_ms, result


def summary(samples):
    return (f"{statistics.median(samples):.2f} ms ({min(samples):.2f}, "
            f"{max(samples):.2f})")


def main(argv):
    args = parse_args(argv)
    import torch
    import flashcpu

    types = {"bf16": (torch.bfloat16, torch.float32),
             "f32": (torch.float32, torch.float64)}
    dtypes = args.dtype.split(",")
    for name in dtypes:
        if name not in types:
            raise SystemExit(f"--dtype: {name!r} is not one of {sorted(types)}")
    heads, kv_heads, dim = 32, 8, 128
    keys = args.prefix + args.rows
    generator = torch.Generator().manual_seed(7)
    base_q = torch.randn(1, args.rows, heads, dim, generator=generator)
    base_k = torch.randn(1, keys, kv_heads, dim, generator=generator)
    base_v = torch.randn(1, keys, kv_heads, dim, generator=generator)
    # key j visible to row i iff j <= prefix + i
    whole = args.prefix == 0
    mask = None if whole else (torch.arange(keys)[None, :] <=
                               args.prefix + torch.arange(args.rows)[:, None])
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_call(tq, tk, tv):
        return sdpa(tq, tk, tv, attn_mask=mask, is_causal=whole, enable_gqa=True)

    print(f"prefill: {args.rows} rows onto {args.prefix} cached keys, 32/8 "
          f"heads, head_dim 128; torch {torch.__version__}; in turns, "
          f"{args.reps} calls each")
    print("| dtype | threads | flashcpu | torch SDPA | torch/flashcpu "
          "(medians) | per turn | error flashcpu | error torch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in dtypes:
        dtype, wide = types[name]
        q, k, v = (t.to(dtype) for t in (base_q, base_k, base_v))
        out = torch.empty_like(q)
        tq, tk, tv = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        reference = torch_call(tq.to(wide), tk.to(wide),
                               tv.to(wide)).transpose(1, 2)
        for text in args.threads.split(","):
            threads = os.cpu_count() if text == "all" else int(text)
            torch.set_num_threads(threads)
            with flashcpu.Context(threads=threads) as context:
                ours, theirs, theirs_out = in_turns(
                    lambda: flashcpu.attention(q, k, v, causal=True, out=out,
                                               context=context),
                    lambda: torch_call(tq, tk, tv), args.reps)
                error_ours = (out.to(wide) - reference).abs().max().item()
                error_theirs = (theirs_out.transpose(1, 2).to(wide) -
                                reference).abs().max().item()
            turns = statistics.median(t / o for o, t in zip(ours, theirs))
            print(f"| {name} | {threads} | {summary(ours)} | {summary(theirs)} | "
                  f"{statistics.median(theirs) / statistics.median(ours):.2f}x | "
                  f"{turns:.2f}x | {error_ours:.2e} | {error_theirs:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
