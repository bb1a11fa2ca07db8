#!/usr/bin/env python3
"""A transformers model's generate() with flashcpu's attention against
attn_implementation="sdpa", in one process and one run.

Builds a randomly initialised model from a config (no weights are
downloaded): "llama" (32 query heads, 8 KV heads, head_dim 128, hidden 4096)
or "gemma2" (softcap and a sliding window), with --layers layers. For each
backend it runs --generate-reps greedy generate() calls of --new-tokens
tokens after a --prompt-token prompt, the backends alternating (so that
neither gets all of the host's quiet or busy moments, nor always runs
second), and reports medians over them:
  prefill tokens/s   the prompt's forward pass: the time to the first new
                     token of each generate(), and --prefill-reps more
                     prefills (generate with 1 new token)
  decode tokens/s    the new tokens after the first, timed inside
                     generate() at each token's logits
  generate s         the whole generate()
  attention s        time inside the attention function during generate()
  decode call us     its mean per call of one query row (the new tokens)
  library us         of that, the flashcpu library call (flashcpu only; with
                     flashcpu.native built, timed inside the compiled
                     function, which also reports its own time)
and the bound that this model puts on any attention: sdpa's generate() time
over its time less the time in its attention (what generate() would gain
if attention took no time at all), the same for prefill; and checks that
the greedy tokens are the same and how far the prompt's logits are apart.

  python3 tools/hf_generate_compare.py --model llama --dtype bf16 \\
      --prompt-tokens 4096 --new-tokens 256 --layers 4 --json out.json

Needs torch, transformers and this repository's Python package (python/, or
another version's with --package; the library through FLASHCPU_LIBRARY).
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


class StepClock:
    """A logits processor that notes the time each new token's logits
    arrive: the first after the prompt's forward, each later one after one
    decode step."""

    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


class LibraryTimer:
    """Adds up the time of the package's library calls (both of its call
    paths, wrapped by timed()), so that a decode call's time splits into
    the library and the Python around it."""

    def __init__(self):
        self.decoding = False  # set by AttentionTimer around each call
        self.reset()

    def reset(self):
        self.decode_seconds, self.decode_calls = 0.0, 0

    def timed(self, function):
        def call(*args):
            start = time.perf_counter()
            try:
                return function(*args)
            finally:
                if self.decoding:
                    self.decode_seconds += time.perf_counter() - start
                    self.decode_calls += 1
        return call


class _TimedModule:
    """The compiled extension with its attention entry points wrapped."""

    def __init__(self, module, wrap):
        self._module = module
        self.attention_into = wrap(module.attention_into)
        if hasattr(module, "attention_new"):
            self.attention_new = wrap(module.attention_new)
        self.attention_paged_into = wrap(module.attention_paged_into)

    def __getattr__(self, name):
        return getattr(self._module, name)


def wrap_library_calls(flashcpu, wrap):
    """Replaces the package's library call paths by wrap(path): the general
    one and, in versions that have them, the backend's short path and the
    compiled extension's calls (a call there is the library call and the
    C++ argument checks around it)."""
    flashcpu._api._run = wrap(flashcpu._api._run)
    if hasattr(flashcpu, "_model_call"):
        flashcpu._model_call.run_packed = wrap(flashcpu._model_call.run_packed)
    try:
        import flashcpu.native as native
    except ImportError:
        return
    if native.available():
        native._module = _TimedModule(native._module, wrap)


# The compiled function's stages (backend_stage_times), in its order.
STAGES = ("arguments and params", "context", "views and output", "library call and the GIL",
          "result")


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


class AttentionTimer:
    """Wraps an attention function and adds up the time spent in it, and
    apart the time and count of decode calls (one query row)."""

    def __init__(self, function, library=None):
        self.function, self.library = function, library
        self.reset()

    def reset(self):
        self.seconds, self.decode_seconds, self.decode_calls = 0.0, 0.0, 0

    def __call__(self, module, query, *args, **kwargs):
        if self.library is not None:
            self.library.decoding = query.shape[-2] == 1
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
    parser.add_argument("--generate-reps", type=int, default=3,
                        help="timed generate() calls per backend, the backends alternating "
                             "(medians are reported)")
    parser.add_argument("--prefill-reps", type=int, default=2,
                        help="prefills per backend beside those of the generate() calls, "
                             "the backends alternating")
    parser.add_argument("--flashcpu-pool", choices=["auto", "own"], default="auto",
                        help="auto: the package's default (torch's OpenMP threads where "
                             "torch has them); own: flashcpu's own pinned pool")
    parser.add_argument("--package",
                        help="the folder holding the flashcpu package to measure "
                             "(default: this checkout's python/)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.generate_reps < 1 or args.prefill_reps < 0:
        parser.error("--generate-reps must be at least 1 and --prefill-reps at least 0")
    if args.new_tokens < 2:
        parser.error("--new-tokens must be at least 2 (decode is timed between tokens)")

    import torch
    import transformers
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if args.package:
        sys.path.insert(0, args.package)
    import flashcpu
    import flashcpu.transformers as backend

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    ours = backend.register()
    if args.flashcpu_pool == "own":
        # The package has no setter for its default context: set it, and
        # mark torch as seen so that it is not made again on torch's runtime.
        flashcpu._context._local.context = flashcpu.Context(host_openmp=False)
        flashcpu._context._local.checked_torch = True
    # The package's library call, timed apart inside flashcpu's decode calls.
    library = LibraryTimer()
    wrap_library_calls(flashcpu, library.timed)
    # The function register() installs: compiled where flashcpu.native is
    # built, which then times its own library calls.
    function = backend.function()
    compiled = None if function is backend.attention_forward else flashcpu.native.available()
    timers = {"sdpa": AttentionTimer(sdpa_attention_forward),
              ours: AttentionTimer(function, library)}
    for name in ("sdpa", ours):
        AttentionInterface.register(name + "_timed", timers[name])
        AttentionMaskInterface.register(name + "_timed", sdpa_mask)
    model = build_model(transformers, torch, args.model, args.layers, dtype, args.vocab)
    torch.manual_seed(1)
    prompt = torch.randint(0, args.vocab, (1, args.prompt_tokens))
    tokens, logits = {}, {}
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

    def time_generate(name):
        clock = StepClock()
        timers[name].reset()
        library.reset()
        if compiled is not None:
            compiled.set_backend_timing(name == ours)
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False,
                             logits_processor=transformers.LogitsProcessorList([clock]))
        total = time.perf_counter() - start
        steps = clock.times
        if len(steps) != args.new_tokens:
            sys.exit(f"generate() made {len(steps)} tokens' logits; expected {args.new_tokens}")
        timer = timers[name]
        run = {"generate_s": total, "prefill_s": steps[0] - start,
               "decode_tokens_per_s": (len(steps) - 1) / (steps[-1] - steps[0]),
               "attention_s": timer.seconds,
               "prefill_attention_s": timer.seconds - timer.decode_seconds,
               "decode_call_us": 1e6 * timer.decode_seconds / max(timer.decode_calls, 1)}
        if name == ours and compiled is not None:
            calls, whole_ns, library_ns = compiled.backend_times()
            stages = compiled.backend_stage_times()
            compiled.set_backend_timing(False)
            run["library_us"] = library_ns / 1e3 / max(calls, 1)
            run["function_us"] = whole_ns / 1e3 / max(calls, 1)  # inside the C++ function
            run["stages_us"] = [t / 1e3 / max(calls, 1) for t in stages]
        elif name == ours:
            run["library_us"] = 1e6 * library.decode_seconds / max(library.decode_calls, 1)
        return out, run

    with torch.no_grad():
        for name, registered in order:  # warm-up, and the prompt's logits
            use(registered)
            logits[name] = model(prompt[:, : min(args.prompt_tokens, 1024)]).logits.float()
            model.generate(prompt[:, :64], max_new_tokens=2, do_sample=False)
        runs = {name: [] for name, _ in order}
        prefills = {name: [] for name, _ in order}
        # The backends alternate, each turn reversing the order of the one
        # before: one forward alone moves by 20-40% on a busy host, and the
        # backend that runs second in a turn can lose up to a sixth.
        for rep in range(args.generate_reps):
            for name, registered in (order if rep % 2 == 0 else order[::-1]):
                use(registered)
                tokens[name], run = time_generate(name)
                runs[name].append(run)
                prefills[name].append(run["prefill_s"])
        for rep in range(args.prefill_reps):
            for name, registered in (order[::-1] if rep % 2 == 0 else order):
                use(registered)
                prefills[name].append(time_prefill())
    results = {}
    for name, _ in order:
        r = {key: median([run[key] for run in runs[name]])
             for key in ("generate_s", "decode_tokens_per_s", "attention_s", "decode_call_us")}
        r["prefill_tokens_per_s"] = args.prompt_tokens / median(prefills[name])
        r["prefill_s_each"] = prefills[name]
        r["runs"] = runs[name]
        results[name] = r
        if name == ours:
            r["library_us"] = median([run["library_us"] for run in runs[name]])
            if "function_us" in runs[name][0]:
                r["function_us"] = median([run["function_us"] for run in runs[name]])
                r["stages_us"] = [median([run["stages_us"][i] for run in runs[name]])
                                  for i in range(len(STAGES))]
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
    print(f"medians of {args.generate_reps} generate() calls per backend (prefill: of "
          f"{args.generate_reps + args.prefill_reps}), the backends alternating, "
          f"{args.first} first")
    print(f"{'backend':10s} {'prefill tok/s':>14s} {'decode tok/s':>13s} {'generate s':>11s} "
          f"{'attention s':>12s} {'decode call us':>15s} {'library us':>11s}")
    for name, r in results.items():
        lib = f"{r['library_us']:11.1f}" if "library_us" in r else f"{'':11s}"
        print(f"{name:10s} {r['prefill_tokens_per_s']:14.1f} {r['decode_tokens_per_s']:13.2f} "
              f"{r['generate_s']:11.2f} {r['attention_s']:12.2f} {r['decode_call_us']:15.1f} "
              f"{lib}")
    if "function_us" in results[ours]:
        r = results[ours]
        print(f"{ours}'s compiled function: {r['function_us']:.1f} us a decode call inside "
              f"it, {r['function_us'] - r['library_us']:.1f} us of it outside the library "
              f"call; the Python timer around it adds its own cost to \"decode call us\"")
        print("  by stage: " + ", ".join(f"{name} {us:.1f} us"
                                         for name, us in zip(STAGES, r["stages_us"])))
    ratios = {
        "prefill": results[ours]["prefill_tokens_per_s"] / results["sdpa"]["prefill_tokens_per_s"],
        "decode": results[ours]["decode_tokens_per_s"] / results["sdpa"]["decode_tokens_per_s"],
        "generate": results["sdpa"]["generate_s"] / results[ours]["generate_s"],
        "attention": results["sdpa"]["attention_s"] / results[ours]["attention_s"]}
    print(f"{ours} against sdpa: prefill {ratios['prefill']:.2f}x, decode "
          f"{ratios['decode']:.2f}x, generate {ratios['generate']:.2f}x the speed; "
          f"attention {ratios['attention']:.2f}x lower")
    # Any attention backend's ceiling on this model and host: sdpa's time
    # with its attention taken out (the rest of the model is the same code).
    sdpa = results["sdpa"]
    bound = {"generate": median([run["generate_s"] / (run["generate_s"] - run["attention_s"])
                                 for run in sdpa["runs"]]),
             "prefill": median([run["prefill_s"] / (run["prefill_s"] - run["prefill_attention_s"])
                                for run in sdpa["runs"]])}
    print(f"with attention taking no time, generate() would run at most "
          f"{bound['generate']:.2f}x and prefill {bound['prefill']:.2f}x sdpa's speed "
          f"(sdpa's times over its times less its attention)")
    print(f"same greedy tokens: {same}" + (f" (first difference at new token {first_diff})"
                                           if not same else ""))
    print(f"max |logits sdpa - {ours}| on the prompt's first 1024 tokens: {logit_diff:.3g}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "results": results, "ratios": ratios,
                       "attention_free_bound": bound,
                       "same_tokens": same,
                       "first_difference": first_diff, "max_logit_diff": logit_diff,
                       "torch": torch.__version__, "transformers": transformers.__version__},
                      handle, indent=1)


if __name__ == "__main__":
    main()
