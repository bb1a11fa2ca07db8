#!/usr/bin/env python3
"""flashcpu inside a PyTorch process: a call alone against the same call right
after torch's own parallel work, with flashcpu's own threads and with the
OpenMP runtime torch loaded (flashcpu_context_options.host_openmp).

After a torch op, torch's OpenMP threads keep spinning on every core for a
while; a second pool pinned to the same cores then competes with them. This
script measures that cost and the fix, in one process and one run:

  case          what is timed (medians of --reps calls, microseconds)
  alone         flashcpu_attention back to back
  after torch   flashcpu_attention right after a torch matmul (the matmul
                itself is not timed)
  after a copy  flashcpu_attention after copying 48 MiB (caches as cold as
                after the matmul, torch's threads idle)

for a llama3-8b-shaped bf16 decode (32 query heads, 8 KV heads, head_dim
128, one query row, --kv keys, cache-resident as an engine's hot layer), on
a context with flashcpu's own threads and on one given torch's runtime, and
torch's scaled_dot_product_attention on the same shapes for reference.

  python3 tools/torch_host_interop.py --lib build/src/libflashcpu.so

Needs PyTorch. The library is loaded through ctypes, with the Python
package's mirrors of its structs (python/flashcpu/_library.py).
"""

import argparse
import ctypes
import importlib.util
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mirrors():
    """python/flashcpu/_library.py on its own (the package would load a
    library of its choosing): the structs, checked against the C ones by
    tests/python/test_struct_layout.py."""
    spec = importlib.util.spec_from_file_location(
        "flashcpu_mirrors", os.path.join(ROOT, "python", "flashcpu", "_library.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_library = _mirrors()
Tensor, HostOpenmp, Options = _library.Tensor, _library.HostOpenmp, _library.ContextOptions


BF16 = 2


def load_library(path):
    lib = ctypes.CDLL(path)
    lib.flashcpu_context_options_init.argtypes = [ctypes.POINTER(Options)]
    lib.flashcpu_context_create.argtypes = [ctypes.POINTER(Options),
                                            ctypes.POINTER(ctypes.c_void_p)]
    lib.flashcpu_context_destroy.argtypes = [ctypes.c_void_p]
    lib.flashcpu_context_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                              ctypes.c_size_t]
    lib.flashcpu_last_error.argtypes = [ctypes.c_void_p]
    lib.flashcpu_last_error.restype = ctypes.c_char_p
    lib.flashcpu_attention.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(Tensor)] * 4 + [
        ctypes.c_void_p, ctypes.c_void_p]
    return lib


def torch_openmp_runtime(torch):
    """The OpenMP runtime loaded from torch's own folders, as HostOpenmp."""
    roots = [os.path.dirname(torch.__file__)]
    roots.append(os.path.join(os.path.dirname(roots[0]), "torch.libs"))
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = sorted({line.split()[-1] for line in maps if "/" in line})
    pattern = re.compile(r"lib(gomp|iomp5|omp)[-.\w]*\.so")
    for path in paths:
        if pattern.match(os.path.basename(path)) and any(path.startswith(r) for r in roots):
            runtime = ctypes.CDLL(path)
            try:
                entry = [ctypes.cast(getattr(runtime, name), ctypes.c_void_p).value
                         for name in ("GOMP_parallel", "omp_get_thread_num",
                                      "omp_get_num_threads")]
            except AttributeError:
                continue
            return path, HostOpenmp(*entry)
    return None, None


def make_context(lib, threads, host):
    options = Options()
    lib.flashcpu_context_options_init(ctypes.byref(options))
    if options.struct_size != ctypes.sizeof(Options):
        sys.exit("the library's flashcpu_context_options differs from this script's")
    options.num_threads = threads
    if host is not None:
        options.host_openmp = ctypes.pointer(host)
    ctx = ctypes.c_void_p()
    if lib.flashcpu_context_create(ctypes.byref(options), ctypes.byref(ctx)) != 0:
        sys.exit("flashcpu_context_create: " + lib.flashcpu_last_error(None).decode())
    return ctx


def view(tensor):
    """A flashcpu_tensor of a torch bf16 tensor [B, S, H, D] (BSHD strides)."""
    t = Tensor(tensor.data_ptr(), BF16)
    for i in range(4):
        t.dims[i] = tensor.shape[i]
        t.strides[i] = tensor.stride(i)
    return t


def median_us(samples):
    return statistics.median(samples) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default=os.path.join(ROOT, "build", "src", "libflashcpu.so"))
    parser.add_argument("--kv", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0,
                        help="threads of both contexts (default: torch's)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    import torch
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    lib = load_library(args.lib)
    q = torch.randn(1, 1, 32, 128).to(torch.bfloat16)
    k = torch.randn(1, args.kv, 8, 128).to(torch.bfloat16)
    v = torch.randn(1, args.kv, 8, 128).to(torch.bfloat16)
    a = torch.randn(64, 4096).to(torch.bfloat16)
    b = torch.randn(4096, 4096).to(torch.bfloat16)
    torch.matmul(a, b)  # loads torch's OpenMP runtime and starts its threads
    path, host = torch_openmp_runtime(torch)
    print(f"torch {torch.__version__}, {threads} threads, OpenMP runtime: {path}")

    outputs, cold = {}, {}
    # A single-threaded (numpy) copy of about the matmul's bytes: evicts the
    # caches the way the matmul does, without waking torch's threads.
    import numpy
    sweep_source = numpy.ones(48 << 20, dtype=numpy.uint8)
    sweep = numpy.empty_like(sweep_source)
    tensors = [view(x) for x in (q, k, v)]
    contexts = {"own threads": make_context(lib, threads, None)}
    if host is not None:
        contexts["torch's runtime"] = make_context(lib, threads, host)
    results = {}
    for name, ctx in contexts.items():
        out = torch.empty(1, 1, 32, 128, dtype=torch.bfloat16)
        out_view = view(out)

        def call():
            lib.flashcpu_attention(ctx, *[ctypes.byref(t) for t in tensors],
                                   ctypes.byref(out_view), None, None)
        for _ in range(20):
            call()
        alone, after, swept = [], [], []
        for _ in range(args.reps):
            start = time.perf_counter()
            status = call()
            alone.append(time.perf_counter() - start)
        for _ in range(args.reps):
            torch.matmul(a, b)
            start = time.perf_counter()
            status = call()
            after.append(time.perf_counter() - start)
        for _ in range(args.reps):  # caches as after the matmul, no torch threads
            numpy.copyto(sweep, sweep_source)
            start = time.perf_counter()
            status = call()
            swept.append(time.perf_counter() - start)
        if status != 0:
            sys.exit(f"flashcpu_attention: {lib.flashcpu_last_error(ctx).decode()}")
        results[name] = (median_us(alone), median_us(after))
        cold[name] = median_us(swept)
        outputs[name] = out

    sdpa = torch.nn.functional.scaled_dot_product_attention
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    alone, after = [], []
    for _ in range(args.reps):
        start = time.perf_counter()
        reference = sdpa(qt, kt, vt, enable_gqa=True)
        alone.append(time.perf_counter() - start)
    for _ in range(args.reps):
        torch.matmul(a, b)
        start = time.perf_counter()
        sdpa(qt, kt, vt, enable_gqa=True)
        after.append(time.perf_counter() - start)
    results["torch SDPA"] = (median_us(alone), median_us(after))

    print(f"{'llama3-8b bf16 decode, kv ' + str(args.kv):36s} {'alone':>10s} "
          f"{'after torch':>12s} {'ratio':>7s}")
    for name, (alone_us, after_us) in results.items():
        print(f"{name:36s} {alone_us:8.1f} us {after_us:9.1f} us {after_us / alone_us:7.2f}")
    for name, cold_us in cold.items():
        print(f"{name:36s} {cold_us:8.1f} us after a 48 MiB copy (caches cold, torch idle)")
    for name, out in outputs.items():
        error = (out.float() - reference.transpose(1, 2).float()).abs().max().item()
        print(f"max |flashcpu ({name}) - SDPA| = {error:.3g}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"torch": torch.__version__, "threads": threads, "kv": args.kv,
                       "openmp_runtime": path, "results_us": results}, handle, indent=1)
    for ctx in contexts.values():
        lib.flashcpu_context_destroy(ctx)


if __name__ == "__main__":
    main()
