#!/usr/bin/env python3
"""A transformers model's generate() with flashcpu's attention against
attn_implementation="sdpa", in one process and one run.

Builds a randomly initialised model from a config (no weights are
downloaded): "llama" (32 query heads, 8 KV heads, head_dim 128, hidden 4096)
or "gemma2" (softcap and a sliding window), with --layers layers. For each
backend it runs a greedy generate() of --new-tokens tokens after a
--prompt-token prompt and reports:
  prefill tokens/s   the prompt's forward pass (generate with 1 new token),
                     the median of --prefill-reps timings, the backends
                     alternating
  decode tokens/s    the new tokens after the first, from the two timings
  attention share    time inside the attention function during generate()
  decode call us     its mean per call of one query row (the new tokens)
and checks that the greedy tokens are the same and how far the prompt's
logits are apart.

  python3 tools/hf_generate_compare.py --model llama --dtype bf16 \\
      --prompt-tokens 4096 --new-tokens 256 --layers 4 --json out.json

Needs torch, transformers and this repository's Python package (python/, the
library through FLASHCPU_LIBRARY).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))


def build_model(transformers, torch, kind, layers, dtype, vocab):
    if kind == "llama":
        config = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=4096, intermediate_size=14336,
            num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
            head_dim=128, max_position_embeddings=32768)
        model_class = transformers.LlamaForCausalLM
    else:
        config = transformers.Gemma2Config(
            vocab_size=vocab, hidden_size=3584, intermediate_size=14336,
            num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
            head_dim=256, max_position_embeddings=32768, sliding_window=4096,
            attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
        model_class = transformers.Gemma2ForCausalLM
    torch.manual_seed(0)
    model = model_class(config).to(dtype).eval()
    return model


class AttentionTimer:
    """Wraps an attention function and adds up the time spent in it, and
    apart the time and count of decode calls (one query row)."""

    def __init__(self, function):
        self.function = function
        self.reset()

    def reset(self):
        self.seconds, self.decode_seconds, self.decode_calls = 0.0, 0.0, 0

    def __call__(self, module, query, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.function(module, query, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            self.seconds += elapsed
            if query.shape[-2] == 1:
                self.decode_seconds += elapsed
                self.decode_calls += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["llama", "gemma2"], default="llama")
    parser.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--first", choices=["sdpa", "flashcpu"], default="sdpa",
                        help="which backend runs first (run both orders to see order bias)")
    parser.add_argument("--prefill-reps", type=int, default=5,
                        help="prefill timings per backend, the backends alternating after "
                             "the first (the median is reported)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.prefill_reps < 1:
        parser.error("--prefill-reps must be at least 1")

    import torch
    import transformers
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    import flashcpu
    import flashcpu.transformers as backend

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    ours = backend.register()
    timers = {"sdpa": AttentionTimer(sdpa_attention_forward),
              ours: AttentionTimer(backend.attention_forward)}
    for name in ("sdpa", ours):
        AttentionInterface.register(name + "_timed", timers[name])
        AttentionMaskInterface.register(name + "_timed", sdpa_mask)
    model = build_model(transformers, torch, args.model, args.layers, dtype, args.vocab)
    torch.manual_seed(1)
    prompt = torch.randint(0, args.vocab, (1, args.prompt_tokens))
    results, tokens, logits = {}, {}, {}
    order = [("sdpa", "sdpa_timed"), (ours, ours + "_timed")]
    if args.first == "flashcpu":
        order.reverse()

    def use(registered):
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(registered)
        else:
            model.config._attn_implementation = registered

    def time_prefill():
        start = time.perf_counter()
        model.generate(prompt, max_new_tokens=1, do_sample=False)
        return time.perf_counter() - start

    prefills, totals = {name: [] for name, _ in order}, {}
    for name, registered in order:
        use(registered)
        with torch.no_grad():
            logits[name] = model(prompt[:, : min(args.prompt_tokens, 1024)]).logits.float()
            model.generate(prompt[:, :64], max_new_tokens=2, do_sample=False)  # warm-up
            prefills[name].append(time_prefill())
            timers[name].reset()
            start = time.perf_counter()
            tokens[name] = model.generate(prompt, max_new_tokens=args.new_tokens,
                                          min_new_tokens=args.new_tokens, do_sample=False)
            totals[name] = time.perf_counter() - start
        results[name] = {"generate_s": totals[name], "attention_s": timers[name].seconds,
                         "decode_call_us": 1e6 * timers[name].decode_seconds /
                         max(timers[name].decode_calls, 1)}
    # More prefills, the backends alternating, so that neither gets all of
    # the host's quiet or busy moments: one forward alone moves by 20-40%.
    with torch.no_grad():
        for rep in range(args.prefill_reps - 1):
            for name, registered in (order[::-1] if rep % 2 == 0 else order):
                use(registered)
                prefills[name].append(time_prefill())
    for name, r in results.items():
        prefill = sorted(prefills[name])[len(prefills[name]) // 2]
        decode = max(totals[name] - prefill, 1e-9)
        r["prefill_tokens_per_s"] = args.prompt_tokens / prefill
        r["prefill_s_each"] = prefills[name]
        r["decode_tokens_per_s"] = (args.new_tokens - 1) / decode
    for name, r in results.items():
        if r["attention_s"] <= 0.0:
            sys.exit(f"the {name} attention function was never called: the model did not "
                     "switch implementations")
    same = bool(torch.equal(tokens["sdpa"], tokens[ours]))
    first_diff = None
    if not same:
        a, b = tokens["sdpa"][0, args.prompt_tokens:], tokens[ours][0, args.prompt_tokens:]
        first_diff = int((a != b).nonzero()[0, 0]) if (a != b).any() else None
    logit_diff = (logits["sdpa"] - logits[ours]).abs().max().item()
    print(f"{args.model} {args.dtype}, {args.layers} layers, prompt {args.prompt_tokens}, "
          f"{args.new_tokens} new tokens, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {torch.get_num_threads()} threads, "
          f"flashcpu {flashcpu.__version__}")
    print(f"{'backend':10s} {'prefill tok/s':>14s} {'decode tok/s':>13s} {'generate s':>11s} "
          f"{'attention s':>12s} {'decode call us':>15s}")
    for name, r in results.items():
        print(f"{name:10s} {r['prefill_tokens_per_s']:14.1f} {r['decode_tokens_per_s']:13.2f} "
              f"{r['generate_s']:11.2f} {r['attention_s']:12.2f} {r['decode_call_us']:15.1f}")
    print(f"same greedy tokens: {same}" + (f" (first difference at new token {first_diff})"
                                           if not same else ""))
    print(f"max |logits sdpa - {ours}| on the prompt's first 1024 tokens: {logit_diff:.3g}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "results": results, "same_tokens": same,
                       "first_difference": first_diff, "max_logit_diff": logit_diff,
                       "torch": torch.__version__, "transformers": transformers.__version__},
                      handle, indent=1)


if __name__ == "__main__":
    main()
