#!/usr/bin/env python3
"""Chunked prefill, flashcpu against PyTorch's scaled_dot_product_attention:
--rows new query rows attend to --prefix cached keys plus themselves
(bottom-right causal), the step a serving engine runs for a prompt chunk.
llama3-8b heads (32 query, 8 KV, head_dim 128), bf16, one process, the same
tensors for both; torch gets its [B, H, S, D] layout and a boolean mask.

  PYTHONPATH=python FLASHCPU_LIBRARY=build/src/libflashcpu.so.0 \\
      python3 tools/chunked_prefill_compare.py --threads 1,all

Prints medians (min, max) of --reps calls after one warm-up, and each
output's largest error against an f32 reference computed by torch.
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
    parser.add_argument("--threads", default="1,all",
                        help="comma-separated counts, 'all' for os.cpu_count()")
    parser.add_argument("--reps", type=int, default=7)
    return parser.parse_args(argv)


def timed(call, reps):
    """(median, min, max) ms of reps calls after a warm-up, and the last
    call's result."""
    result = call()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        result = call()
        samples.append((time.perf_counter() - start) * 1e3)
    return (statistics.median(samples), min(samples), max(samples)), result


def main(argv):
    args = parse_args(argv)
    import torch
    import flashcpu

    heads, kv_heads, dim = 32, 8, 128
    keys = args.prefix + args.rows
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(1, args.rows, heads, dim, generator=generator).bfloat16()
    k = torch.randn(1, keys, kv_heads, dim, generator=generator).bfloat16()
    v = torch.randn(1, keys, kv_heads, dim, generator=generator).bfloat16()
    out = torch.empty_like(q)
    # torch: [B, H, S, D] contiguous, key j visible to row i iff j <= prefix + i
    tq, tk, tv = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    mask = (torch.arange(keys)[None, :] <=
            args.prefix + torch.arange(args.rows)[:, None])
    sdpa = torch.nn.functional.scaled_dot_product_attention
    reference = sdpa(tq.float(), tk.float(), tv.float(), attn_mask=mask,
                     enable_gqa=True).transpose(1, 2)

    print(f"chunked prefill: {args.rows} rows onto {args.prefix} cached keys, "
          f"32/8 heads, head_dim 128, bf16; torch {torch.__version__}")
    print("| threads | flashcpu | torch SDPA | flashcpu/torch | error flashcpu | error torch |")
    print("| --- | --- | --- | --- | --- | --- |")
    for text in args.threads.split(","):
        threads = os.cpu_count() if text == "all" else int(text)
        torch.set_num_threads(threads)
        with flashcpu.Context(threads=threads) as context:
            ours, _ = timed(lambda: flashcpu.attention(q, k, v, causal=True, out=out,
                                                       context=context), args.reps)
            theirs, theirs_out = timed(
                lambda: sdpa(tq, tk, tv, attn_mask=mask, enable_gqa=True), args.reps)
            error_ours = (out.float() - reference).abs().max().item()
            error_theirs = (theirs_out.transpose(1, 2).float() -
                            reference).abs().max().item()
        print(f"| {threads} | {ours[0]:.2f} ms ({ours[1]:.2f}, {ours[2]:.2f}) | "
              f"{theirs[0]:.2f} ms ({theirs[1]:.2f}, {theirs[2]:.2f}) | "
              f"{theirs[0] / ours[0]:.2f}x | {error_ours:.2e} | {error_theirs:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
