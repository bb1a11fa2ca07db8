#!/usr/bin/env python3
"""What the Python package adds to a call: a llama3-8b-shaped bf16 decode
(32 query heads, 8 KV heads, head_dim 128, one query row, [B, H, S, D] as
transformers passes them) timed several ways in one torch process, at --kv
keys and on a 1-key cache (the floor, where the call's own work is least):
  library call      flashcpu_attention through ctypes, arguments prepared once
  attention out=    flashcpu.attention(..., out=out): an engine loop's call
                    (through the compiled extension where it is built:
                    --native builds it; "attention out= ctypes" without it)
  attention         flashcpu.attention, a new output each call
  torch op          torch.ops.flashcpu.attention (its C++ kernel where the
                    extension is built; "torch op Python kernel" without it)
  backend           flashcpu.transformers.attention_forward (the Python function)
  backend compiled  the function flashcpu.transformers.register() installs
                    where the extension is built (what a model calls)
  sdpa              transformers' sdpa_attention_forward, for comparison
and, at --kv, the library call and attention out= right after a torch bf16
matmul (the call a model makes after its projections; on CPUs with AMX its
tiles), and the library call after an f32 matmul (the same threads busy,
no tiles), over the same call alone. --pool own runs the calls on
flashcpu's own pinned threads instead of torch's. Medians of --calls
calls, --rounds rounds. The calls run back to back, so the caches are warm
unless --rotate N cycles every row's calls at --kv through N caches (as
a model's layers do; enough of them to pass the last-level cache compares
with `flashcpu run`, which rotates the same way); inside a model's
generate() each Python step costs more (tools/hf_generate_compare.py's
"decode call us").

  python3 tools/python_call_overhead.py --kv 1024
  python3 tools/python_call_overhead.py --package OLD/python   # another version

Needs torch, transformers and flashcpu's Python package (this checkout's
python/, or --package; the library through FLASHCPU_LIBRARY).
"""

import argparse
import ctypes
import os
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kv", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--package", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"),
        help="the folder holding the flashcpu package to measure")
    parser.add_argument("--rotate", type=int, default=1,
                        help="K/V caches the calls at --kv cycle through")
    parser.add_argument("--floor", action="store_true",
                        help="only the 1-key floor rows (no --kv rows, no matmuls)")
    parser.add_argument("--native", action="store_true",
                        help="build flashcpu.native first (torch.utils.cpp_extension)")
    parser.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd",
                        help="the tensors' layout: bhsd as transformers passes them (default), "
                             "bshd as `flashcpu run` holds its caches")
    parser.add_argument("--pool", choices=["auto", "own"], default="auto",
                        help="auto: the package's default context (torch's OpenMP threads "
                             "where torch has them); own: flashcpu's own pinned pool")
    args = parser.parse_args()
    sys.path.insert(0, args.package)

    import torch
    try:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:  # transformers missing: the sdpa row left out
        sdpa_attention_forward = None
    import flashcpu
    import flashcpu.transformers as backend  # needs no transformers
    from flashcpu import _api, _arrays, _context

    torch.manual_seed(0)
    if args.pool == "own":
        # No setter for the package's default context: set it, and mark torch
        # as seen so that it is not made again on torch's runtime.
        _context._local.context = flashcpu.Context(host_openmp=False)
        _context._local.checked_torch = True
    ctx = _context.default_context()
    native = None
    try:
        import flashcpu.native as native
        if args.native:
            native.build()
        print(f"compiled extension: {'loaded' if native.available() else 'not built'}")
    except ImportError:
        print("compiled extension: not in this version")
    args.native_module = native
    print(f"{ctx}, torch {torch.__version__}, flashcpu {flashcpu.__version__} "
          f"from {os.path.dirname(flashcpu.__file__)}")
    floors = measure(args, 1, torch, flashcpu, backend, sdpa_attention_forward, _api,
                     _arrays, ctx)
    report(args, 1, floors)
    floor_lib = statistics.median(floors["library call"])
    for name in ("torch op", "torch op Python kernel"):
        if name in floors:
            print(f"  {name} over C: floor "
                  f"{statistics.median(floors[name]) - floor_lib:+.1f} us")
    if args.floor:
        return
    medians = measure(args, args.kv, torch, flashcpu, backend, sdpa_attention_forward, _api,
                      _arrays, ctx)
    report(args, args.kv, medians)
    lib, fast = (statistics.median(medians[n]) for n in ("library call", "attention out="))
    floor_fast = statistics.median(floors["attention out="])
    print(f"  package over C: floor {floor_fast - floor_lib:+.1f} us, "
          f"kv {args.kv} {fast / lib:.3f}x")
    for name, before in (("library call", "matmul"), ("attention out=", "matmul"),
                         ("library call", "f32 matmul")):
        alone = statistics.median(medians[name])
        after = statistics.median(medians[f"{name} after {before}"])
        print(f"  {name} after a torch {before}: {after:.1f} us, {after / alone:.3f}x alone")


def measure(args, kv, torch, flashcpu, backend, sdpa_attention_forward, _api, _arrays,
            ctx):
    bhsd = args.layout == "bhsd"
    q = torch.randn((1, 32, 1, 128) if bhsd else (1, 1, 32, 128), dtype=torch.bfloat16)
    count = args.rotate if kv > 1 else 1
    shape = (1, 8, kv, 128) if bhsd else (1, kv, 8, 128)
    caches = [(torch.randn(shape, dtype=torch.bfloat16),
               torch.randn(shape, dtype=torch.bfloat16)) for _ in range(count)]
    k, v = caches[0]
    out = torch.empty_like(q)
    turn = [0]

    def next_cache():
        turn[0] = (turn[0] + 1) % count
        return turn[0]
    a = torch.randn(4096, 4096, dtype=torch.bfloat16)
    b = torch.randn(4096, 256, dtype=torch.bfloat16)
    a32, b32 = a.float(), b.float()

    class Module:  # what the attention functions read from a layer
        is_causal, num_key_value_groups, training = True, 4, False

    if hasattr(_api, "plain_params"):
        params = _api.plain_params(True, (-1, -1), 0.0, None)
    else:  # a version before prepared params
        params = _api.new_params()
        params.flags = _api.FLAG_CAUSAL
    views = [[_arrays.view(x, args.layout, name)
              for x, name in ((q, "q"), (k, "k"), (v, "v"), (out, "out"))]
             for k, v in caches]
    pointers = [[ctypes.byref(x) for x in some] for some in views]

    def library_call():
        _context_check(_api, ctx, _api._lib.flashcpu_attention(
            ctx.handle, *pointers[next_cache()], None, ctypes.byref(params)))

    def attention_out():
        k, v = caches[next_cache()]
        flashcpu.attention(q, k, v, causal=True, layout=args.layout, out=out)

    native = args.native_module
    compiled = native.available() if native else None

    def attention_out_ctypes():
        native._module = False
        try:
            k, v = caches[next_cache()]
            flashcpu.attention(q, k, v, causal=True, layout=args.layout, out=out)
        finally:
            native._module = compiled

    cases = {
        "library call": (library_call, None),
        "attention out=": (attention_out, None),
        **({"attention out= ctypes": (attention_out_ctypes, None)} if compiled else {}),
        "attention": (lambda: flashcpu.attention(q, *caches[next_cache()], causal=True,
                                                 layout=args.layout), None),
    }
    switches = {}  # case -> a function run with True before its calls, False after
    try:
        import flashcpu.torch_ops as ops  # an older version: torch 2.4 or later

        def op_call():
            return torch.ops.flashcpu.attention(q, *caches[next_cache()], True,
                                                layout=args.layout)
        cases["torch op"] = (op_call, None)
        if getattr(ops, "compiled", lambda: False)():
            cases["torch op Python kernel"] = (op_call, None)
            switches["torch op Python kernel"] = (
                lambda python: ops.use_python() if python else ops.use_native(compiled))
    except ImportError:
        pass
    if bhsd:  # transformers passes [B, H, S, D]
        cases["backend"] = (lambda: backend.attention_forward(Module, q, *caches[next_cache()],
                                                              None), None)
        function = backend.function()
        if function is not backend.attention_forward:
            cases["backend compiled"] = (lambda: function(Module, q, *caches[next_cache()], None),
                                         None)
    if bhsd and sdpa_attention_forward is not None:
        cases["sdpa"] = (lambda: sdpa_attention_forward(Module, q, *caches[next_cache()], None,
                                                        is_causal=True), None)
    if kv > 1:
        cases["library call after matmul"] = (library_call, lambda: torch.mm(a, b))
        cases["attention out= after matmul"] = (attention_out, lambda: torch.mm(a, b))
        # f32: the same threads busy just before, without bf16 tiles (AMX) in the matmul.
        cases["library call after f32 matmul"] = (library_call, lambda: torch.mm(a32, b32))
    medians = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, (call, before) in cases.items():
            switch = switches.get(name, lambda entering: None)
            switch(True)
            try:
                medians[name].append(time_calls(args, call, before))
            finally:
                switch(False)
    return medians


def time_calls(args, call, before):
    """The median of --calls calls (a quarter as many with a call before
    each), in microseconds."""
    for _ in range(20):
        call()
    times = []
    for _ in range(args.calls if before is None else args.calls // 4):
        if before is not None:
            before()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def _context_check(_api, ctx, status):
    if status:
        raise RuntimeError(f"flashcpu_attention: status {status}")


def report(args, kv, medians):
    rotating = f", {args.rotate} caches in turn" if kv > 1 and args.rotate > 1 else ""
    print(f"kv {kv}{rotating}:")
    for name, values in medians.items():
        print(f"  {name:29s} " + " / ".join(f"{x:.1f}" for x in values) +
              f" us (medians, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
