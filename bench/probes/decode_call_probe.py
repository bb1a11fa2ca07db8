#!/usr/bin/env python3
"""Where the time of flashcpu's decode calls inside a transformers model's
generate() goes: the library call timed alone, and again next to one change
around it, to tell the state the model leaves the caches and threads in
from the kernel's own time.

A random Llama-shaped model (32 query heads, 8 KV heads, head_dim 128, 4
layers, bf16, as tools/hf_generate_compare.py builds it) runs a greedy
generate() on flashcpu's backend; in every decode call (one query row):
  once    the library call, timed
  twice   the library call, then the same call again at once: the second
          finds K and V in the caches of the threads that read them
  warm    a torch parallel region just before the library call: torch's
          OpenMP threads are awake when it starts
  touch   torch reads K and V (a sum over each) before the backend's call:
          the time of that read, and of the backend's call after it
  parts   the backend's call, the library call in it, the Python around
          that, and a torch.empty of the output's shape just after (one
          step of that Python, timed alone)
  steps   one torch step (an allocation of the output, or one attribute
          read of q) timed as the first thing in each decode call, the
          steps in rotation: what a step costs while the caches are cold
Medians over the decode calls of one generate(), each mode in its own
generate() after a warm-up.

  python3 bench/probes/decode_call_probe.py --prompt-tokens 4096 --new-tokens 48

Needs torch, transformers and this repository's Python package (python/,
the library through FLASHCPU_LIBRARY).
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

MODES = ("once", "twice", "warm", "touch", "parts", "steps")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--package",
                        help="the folder holding the flashcpu package to measure "
                             "(default: this checkout's python/)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated, from " + ", ".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            parser.error(f"mode {mode!r}: expected one of {', '.join(MODES)}")

    import torch
    import transformers
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
    if args.package:
        sys.path.insert(0, args.package)
    import flashcpu
    import flashcpu.transformers as backend
    from hf_generate_compare import build_model, wrap_library_calls

    state = {"mode": "once", "decode": False, "times": []}

    def timed(library_call):
        """The package's library call (either of its call paths), timed."""

        def timed_library_call(*call):
            if not state["decode"]:
                return library_call(*call)
            if state["mode"] == "warm":
                torch.ones(1 << 20).add_(1.0)  # a parallel region on torch's threads
            start = time.perf_counter()
            result = library_call(*call)
            first = time.perf_counter()
            if state["mode"] == "twice":
                library_call(*call)
                state["times"].append((first - start, time.perf_counter() - first))
            elif state["mode"] == "parts":
                state["library"] = first - start
            elif state["mode"] not in ("touch", "steps"):
                state["times"].append((first - start,))
            return result
        return timed_library_call

    def attention(module, query, key, value, *rest, **options):
        state["decode"] = query.shape[-2] == 1
        if state["mode"] == "touch" and state["decode"]:
            start = time.perf_counter()
            key.sum()
            value.sum()
            read = time.perf_counter()
            result = backend.attention_forward(module, query, key, value, *rest, **options)
            state["times"].append((read - start, time.perf_counter() - read))
            return result
        if state["mode"] == "steps" and state["decode"]:
            step = len(state["times"]) % len(steps)
            shape = (query.shape[0], query.shape[2], query.shape[1], query.shape[3])
            start = time.perf_counter()
            steps[step][1](query, shape)
            state["times"].append((step, time.perf_counter() - start))
        if state["mode"] == "parts" and state["decode"]:
            start = time.perf_counter()
            result = backend.attention_forward(module, query, key, value, *rest, **options)
            call = time.perf_counter() - start
            start = time.perf_counter()
            torch.empty(result[0].shape, dtype=result[0].dtype)
            empty = time.perf_counter() - start
            state["times"].append((call, state["library"], call - state["library"], empty))
            return result
        return backend.attention_forward(module, query, key, value, *rest, **options)

    # (label, step(q, the output's shape [B, L, H, D])), timed one per call
    steps = [("torch.empty(shape, dtype=)", lambda q, s: torch.empty(s, dtype=q.dtype)),
             ("torch.empty(*shape, dtype=)", lambda q, s: torch.empty(*s, dtype=q.dtype)),
             ("q.new_empty(shape)", lambda q, s: q.new_empty(s)),
             ("torch.empty_like(q)", lambda q, s: torch.empty_like(q)),
             ("q.shape", lambda q, s: q.shape), ("q.stride()", lambda q, s: q.stride()),
             ("q.data_ptr()", lambda q, s: q.data_ptr()), ("q.is_cpu", lambda q, s: q.is_cpu),
             ("q.dtype", lambda q, s: q.dtype)]

    wrap_library_calls(flashcpu, timed)
    AttentionInterface.register("fcpu_probe", attention)
    AttentionMaskInterface.register("fcpu_probe", sdpa_mask)
    model = build_model(transformers, torch, "llama", 4, torch.bfloat16, 32000)
    model.set_attn_implementation("fcpu_probe")
    torch.manual_seed(1)
    prompt = torch.randint(0, 32000, (1, args.prompt_tokens))
    labels = {"once": ["library call"],
              "twice": ["library call", "the same call again"],
              "warm": ["library call after a torch region"],
              "touch": ["torch's sum of K and V", "backend call after it"],
              "parts": ["backend call", "library call in it", "Python in it",
                        "torch.empty after it"]}
    print(f"prompt {args.prompt_tokens}, {args.new_tokens} new tokens, torch "
          f"{torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, flashcpu {flashcpu.__version__}")
    with torch.no_grad():
        model.generate(prompt[:, :64], max_new_tokens=2, do_sample=False)
        for mode in modes:
            state["mode"], state["times"] = mode, []
            model.generate(prompt, max_new_tokens=args.new_tokens,
                           min_new_tokens=args.new_tokens, do_sample=False)
            if mode == "steps":
                for index, (label, _) in enumerate(steps):
                    times = [t for i, t in state["times"] if i == index]
                    print(f"steps  {label} {1e6 * statistics.median(times):.2f} us "
                          f"(median of {len(times)} decode calls)")
                continue
            columns = list(zip(*state["times"]))
            parts = ", ".join(f"{label} {1e6 * statistics.median(column):.1f} us"
                              for label, column in zip(labels[mode], columns))
            print(f"{mode:6s} {parts} (medians of {len(state['times'])} decode calls)")


if __name__ == "__main__":
    main()
