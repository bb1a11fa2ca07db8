#!/usr/bin/env python3
"""flashcpu against PyTorch's scaled_dot_product_attention, in one run.

Runs flashcpu_bench (google-benchmark, JSON) on the chosen cases, then times
torch.nn.functional.scaled_dot_product_attention on the same shapes, dtypes
and thread counts on the same host, and prints one table: medians (min, max)
of both, the flashcpu/torch throughput ratio and each one's percent of the
ceiling flashcpu_bench measured in the same run (docs/performance.md,
"Against PyTorch").

Cases are named as flashcpu_bench names them:
  <phase>/<preset>/<dtype>/L:<rows>/S:<kv>/B:<batch>/mask:<mask>/threads:<n>
paged K/V add /page:<tokens> before threads (--page), quantized K/V
(--kv-dtype) /kv:<dtype> after the dtype, and the serving step
(--phase serve) names its chunk's cached prefix:
  serve/<preset>/<dtype>/L:<chunk rows>/prefix:<keys>/S:<longest kv>/
      B:<decode requests>/mask:causal[/page:<tokens>]/threads:<n>

How torch is called:
  - tensors [B, H, seq, D] contiguous (torch's preferred layout);
  - GQA: enable_gqa=True where torch has it, else K/V repeated per query
    head before timing (--gqa repeat forces that; the repeat is not timed);
  - masks: flashcpu aligns causal bottom-right, torch's is_causal is
    top-left, so is_causal is used only when L == S with no window; otherwise
    an explicit boolean mask (True = visible) gives the bottom-right causal
    mask, the sliding window and, for batch > 1, each sequence's kv length
    (torch runs the padded batch; flashcpu reads only each length);
  - decode (L = 1) rotates over several layer-sized KV caches, as
    flashcpu_bench does, so that torch is not timed from the last-level cache;
  - paged decode (--page N): torch has no paged attention, so it runs the
    same decode on contiguous K/V, once per shape and thread count, against
    every page size flashcpu ran;
  - the serving step (--phase serve): B decode requests with kv lengths
    spread evenly from 1K to S and one prefill chunk of L rows onto P cached
    keys. torch runs SDPA once per request on that request's contiguous K/V
    [1, Hkv, S_r, D] (B + 1 calls a layer; the chunk with an explicit
    bottom-right causal mask), rotating layers as decode does; flashcpu runs
    one flashcpu_attention_paged call (page:N) or, on contiguous K/V, two
    flashcpu_attention calls (the decode batch with kv_lengths, the chunk);
  - quantized decode (--kv-dtype i8,q8_0,...): torch has no quantized
    attention, so it runs the same decode on the dequantized bf16 cache (what
    a torch engine without a quantized kernel would run), once per shape;
  - presets with softcap (gemma2-9b) are not timed in torch: SDPA has none.

Needs Python 3 and, for the torch side, PyTorch 2.0 or later (imported only
when used); --skip-torch runs the flashcpu side alone, and --dry-run prints
the cases, the flashcpu_bench command and what torch would run, running
neither.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

from compare_cases import (  # tools/, the script's folder
    load_presets,
    case_name,
    batch_lengths,
    serve_requests,
    build_cases,
    torch_key,
    bench_threads,
    run_bench_listing,
    run_flashcpu,
    escape_regex,
    parse_size,
    DEFAULT_BENCH,
    SERVE_REQUESTS,
    SERVE_CHUNK,
    SERVE_PREFIX,
    SERVE_SHORTEST_KV,
    MIN_LAYERS,
    CACHE_MULTIPLE,
    DTYPE_BYTES,
    KV_DTYPES,
)


# -------------------------------------------------------------- torch side
def import_torch():
    try:
        import torch  # noqa: PLC0415 (lazy: --help works without torch)
    except ImportError as error:
        sys.exit(f"torch_compare: PyTorch is not installed for "
                 f"{sys.executable} ({error}).\n  Run this script with the "
                 f"Python that has torch (e.g. a virtual environment's "
                 f"bin/python3), or pass --skip-torch to run only the "
                 f"flashcpu side.")
    if not hasattr(getattr(torch.nn, "functional", None),
                   "scaled_dot_product_attention"):
        sys.exit(f"torch_compare: PyTorch {torch.__version__} has no "
                 f"torch.nn.functional.scaled_dot_product_attention (PyTorch "
                 f"2.0 or later has it). Run this script with a newer torch, "
                 f"or pass --skip-torch to run only the flashcpu side.")
    return torch


def llc_bytes_from_sysfs():
    """Every last-level cache instance together (Linux sysfs)."""
    base = "/sys/devices/system/cpu"
    seen, level_sizes = set(), {}
    try:
        cpus = [c for c in os.listdir(base) if re.fullmatch(r"cpu\d+", c)]
    except OSError:
        return None
    for cpu in cpus:
        cache_dir = os.path.join(base, cpu, "cache")
        for index in (os.listdir(cache_dir) if os.path.isdir(cache_dir) else []):
            path = os.path.join(cache_dir, index)
            try:
                level = int(read_text(os.path.join(path, "level")))
                kind = read_text(os.path.join(path, "type"))
                shared = read_text(os.path.join(path, "shared_cpu_list"))
                size = parse_size(read_text(os.path.join(path, "size"))
                                  .replace("K", " KiB").replace("M", " MiB"))
            except (OSError, ValueError):
                continue
            if kind == "Instruction" or size is None or (level, shared) in seen:
                continue
            seen.add((level, shared))
            level_sizes[level] = level_sizes.get(level, 0) + size
    return level_sizes[max(level_sizes)] if level_sizes else None


def read_text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def memory_bytes():
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 16 << 30


class TorchRunner:
    def __init__(self, torch, gqa, llc, min_time, reps, warmup):
        self.torch = torch
        self.F = torch.nn.functional
        self.llc = llc
        self.min_time, self.reps, self.warmup = min_time, reps, warmup
        self.dtypes = {"f32": torch.float32, "f16": torch.float16,
                       "bf16": torch.bfloat16}
        self.use_enable_gqa = gqa != "repeat" and self._has_enable_gqa()
        self.gqa_mode = ("enable_gqa" if self.use_enable_gqa else
                         "K/V repeated per query head before timing")
        self.prepared = None  # (torch_key, (call, note)) of the last case
        # (torch_key, threads) -> (samples, note): the page sizes of one
        # shape share torch's run.
        self.results = {}

    def _has_enable_gqa(self):
        torch = self.torch
        q = torch.zeros(1, 2, 1, 8)
        kv = torch.zeros(1, 1, 1, 8)
        try:
            self.F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
            return True
        except (TypeError, RuntimeError):
            return False

    def _mask(self, case, lengths):
        """Bottom-right causal, window and kv lengths as a boolean mask
        (True = visible), or None with is_causal when top-left is the same.
        """
        torch = self.torch
        rows, kv = case["rows"], case["kv"]
        kind, causal, window = mask_kind(case, lengths)
        if kind == "none":
            return None, False  # every row sees every key
        if kind == "is_causal":
            return None, True  # top-left and bottom-right coincide
        key = torch.arange(kv).view(1, 1, 1, kv)
        row = torch.arange(rows).view(1, 1, rows, 1)
        length = torch.tensor(lengths).view(-1, 1, 1, 1)
        position = row + (length - rows)  # bottom-right, per sequence
        visible = key < length
        if causal:
            visible = visible & (key <= position)
        if window >= 0:
            visible = visible & (key >= position - window)
        return visible, False

    def _layers(self, case, layer_bytes):
        if case["phase"] not in ("decode", "serve"):
            return 1
        layers = max(MIN_LAYERS, -(-CACHE_MULTIPLE * self.llc // layer_bytes))
        budget = memory_bytes() // 4
        return max(1, min(layers, budget // layer_bytes))

    def run(self, case, threads):
        """Per-sample ms (median, min, max come later) and what was done."""
        if case["preset"]["softcap"] > 0:
            return None, "torch SDPA has no softcap: not timed"
        key = torch_key(case)
        if (key, threads) in self.results:
            return self.results[(key, threads)]
        if self.prepared is None or self.prepared[0] != key:
            self.prepared = None  # free the last case's tensors first
            self.prepared = (key, self._prepare(case))
        call, note = self.prepared[1]
        self.torch.set_num_threads(threads)
        with self.torch.inference_mode():
            samples = time_samples(call, self.warmup, self.reps, self.min_time)
        self.results[(key, threads)] = (samples, note)
        return samples, note

    def _prepare(self, case):
        """Tensors of a case (shared by its thread counts) and its call."""
        if case["phase"] == "serve":
            return self._prepare_serve(case)
        torch, preset = self.torch, case["preset"]
        dtype = self.dtypes[case["dtype"]]
        batch, rows, kv, dim = case["batch"], case["rows"], case["kv"], preset["dim"]
        kv_heads = preset["hkv"] if self.use_enable_gqa else preset["hq"]
        lengths = batch_lengths(case)
        mask, is_causal = self._mask(case, lengths)
        layer_bytes = 2 * batch * kv_heads * kv * dim * DTYPE_BYTES[case["dtype"]]
        layer_count = self._layers(case, layer_bytes)
        generator = torch.Generator().manual_seed(0x5EED)

        def values(*shape):
            return (torch.rand(*shape, generator=generator) * 2 - 1).to(dtype)

        query = values(batch, preset["hq"], rows, dim)
        layers = [(values(batch, kv_heads, kv, dim), values(batch, kv_heads, kv, dim))
                  for _ in range(layer_count)]
        extra = {"enable_gqa": True} if (self.use_enable_gqa and
                                         preset["hq"] != preset["hkv"]) else {}
        state = {"layer": 0}

        def call():
            key, value = layers[state["layer"] % layer_count]
            state["layer"] += 1
            self.F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, is_causal=is_causal, **extra)

        note = []
        if layer_count > 1:
            note.append(f"{layer_count} KV caches rotated "
                        f"({layer_count * layer_bytes / 2**30:.2f} GiB)")
            if layer_count * layer_bytes < CACHE_MULTIPLE * self.llc:
                note.append("under 4x LLC (memory cap)")
        if mask is not None:
            note.append("bool mask" + (" (padded batch)" if batch > 1 else ""))
        elif is_causal:
            note.append("is_causal")
        return call, ", ".join(note)

    def _prepare_serve(self, case):
        """The serving step as SDPA calls, one per request on its own
        contiguous K/V, the chunk with a bottom-right causal mask."""
        torch, preset = self.torch, case["preset"]
        dtype = self.dtypes[case["dtype"]]
        dim = preset["dim"]
        kv_heads = preset["hkv"] if self.use_enable_gqa else preset["hq"]
        requests = serve_requests(case)
        masks = [self._mask({"preset": preset, "rows": rows, "kv": keys,
                             "mask": case["mask"]}, [keys])
                 for rows, keys in requests]
        layer_bytes = (2 * kv_heads * dim * DTYPE_BYTES[case["dtype"]] *
                       sum(keys for _, keys in requests))
        layer_count = self._layers(case, layer_bytes)
        generator = torch.Generator().manual_seed(0x5EED)

        def values(*shape):
            return (torch.rand(*shape, generator=generator) * 2 - 1).to(dtype)

        queries = [values(1, preset["hq"], rows, dim) for rows, _ in requests]
        layers = [[(values(1, kv_heads, keys, dim), values(1, kv_heads, keys, dim))
                   for _, keys in requests] for _ in range(layer_count)]
        extra = {"enable_gqa": True} if (self.use_enable_gqa and
                                         preset["hq"] != preset["hkv"]) else {}
        state = {"layer": 0}

        def call():
            layer = layers[state["layer"] % layer_count]
            state["layer"] += 1
            for query, (key, value), (mask, is_causal) in zip(queries, layer,
                                                              masks):
                self.F.scaled_dot_product_attention(
                    query, key, value, attn_mask=mask, is_causal=is_causal,
                    **extra)

        note = [f"{len(requests)} SDPA calls a layer (one per request)"]
        if layer_count > 1:
            note.append(f"{layer_count} KV caches rotated "
                        f"({layer_count * layer_bytes / 2**30:.2f} GiB)")
            if layer_count * layer_bytes < CACHE_MULTIPLE * self.llc:
                note.append("under 4x LLC (memory cap)")
        if masks[-1][0] is not None:
            note.append("chunk: bool mask (bottom-right)")
        return call, ", ".join(note)


def mask_kind(case, lengths):
    """How torch masks a case: "none" (every row sees every key),
    "is_causal" (top-left causal equals flashcpu's bottom-right: L == S) or
    "bool" (an explicit mask); with the causal flag and window it uses."""
    preset, rows, kv = case["preset"], case["rows"], case["kv"]
    causal = case["mask"] == "causal"
    window = preset["window"] if causal else -1
    if window >= kv - 1:
        window = -1  # the window reaches past the first key anyway
    if all(length == kv for length in lengths) and window < 0:
        if not causal or rows == 1:
            return "none", causal, window
        if rows == kv:
            return "is_causal", causal, window
    return "bool", causal, window


def describe_torch(case, gqa):
    """What TorchRunner runs for a case, in words (--dry-run)."""
    preset = case["preset"]
    if preset["softcap"] > 0:
        return "not timed (torch SDPA has no softcap)"
    heads = preset["hkv"] if gqa else preset["hq"]
    dim = preset["dim"]
    if case["phase"] != "serve":
        lengths = batch_lengths(case)
        kind = mask_kind(case, lengths)[0]
        cache = (f" (the {case['dtype']} cache for kv:{case['kv_dtype']})"
                 if case.get("kv_dtype") else "")
        return (f"SDPA q [{case['batch']}, {preset['hq']}, {case['rows']}, "
                f"{dim}], k/v [{case['batch']}, {heads}, {case['kv']}, {dim}]"
                f"{cache}, mask: {kind}")
    requests = serve_requests(case)
    decode, chunk = requests[:-1], requests[-1]
    kinds = {mask_kind({"preset": preset, "rows": rows, "kv": keys,
                        "mask": case["mask"]}, [keys])[0]
             for rows, keys in decode}
    chunk_kind = mask_kind({"preset": preset, "rows": chunk[0],
                            "kv": chunk[1], "mask": case["mask"]},
                           [chunk[1]])[0]
    return (f"{len(requests)} SDPA calls a layer: {len(decode)} decode q "
            f"[1, {preset['hq']}, 1, {dim}], k/v [1, {heads}, "
            f"{decode[0][1]}..{decode[-1][1]}, {dim}], mask: "
            f"{'/'.join(sorted(kinds))}; chunk q [1, {preset['hq']}, "
            f"{chunk[0]}, {dim}], k/v [1, {heads}, {chunk[1]}, {dim}], mask: "
            f"{chunk_kind} (bottom-right)")


def time_samples(call, warmup, reps, min_time):
    """reps samples, each the mean of enough calls to last min_time."""
    start = time.perf_counter()
    for _ in range(warmup):
        call()
    per_call = (time.perf_counter() - start) / max(warmup, 1)
    calls = max(1, math.ceil(min_time / max(per_call, 1e-9)))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e3)
    return samples


# ------------------------------------------------------------------ report
def summary(samples):
    if not samples:
        return None
    return {"median": statistics.median(samples), "min": min(samples),
            "max": max(samples), "samples": samples}


def fmt_time(stats):
    if not stats:
        return "n/a"
    return f"{stats['median']:.3f} ({stats['min']:.3f}, {stats['max']:.3f})"


def print_table(rows, out):
    header = ["case", "flashcpu ms median (min, max)",
              "torch ms median (min, max)", "flashcpu/torch",
              "flashcpu % ceil", "torch % ceil", "torch notes"]
    table = [header]
    for row in rows:
        ratio = row["ratio"]
        table.append([
            row["case"], fmt_time(row["flashcpu"]), fmt_time(row["torch"]),
            f"{ratio:.2f}x" if ratio else "n/a",
            f"{row['flashcpu_ceiling_pct']:.1f}"
            if row["flashcpu_ceiling_pct"] is not None else "n/a",
            f"{row['torch_ceiling_pct']:.1f}"
            if row["torch_ceiling_pct"] is not None else "n/a",
            row["torch_note"]])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for index, line in enumerate(table):
        print("  ".join(cell.ljust(width)
                        for cell, width in zip(line, widths)).rstrip(), file=out)
        if index == 0:
            print("  ".join("-" * width for width in widths), file=out)


def parse_list(text, convert=str):
    return [convert(item) for item in text.split(",") if item]


def parse_length(text):
    text = text.strip().upper()
    return int(text[:-1]) * 1024 if text.endswith("K") else int(text)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Examples: python3 tools/torch_compare.py --phase prefill "
               "--preset llama3-8b --dtype f32,bf16 --lengths 4096 "
               "--threads 1,all --bench build/bench/flashcpu_bench\n"
               "  python3 tools/torch_compare.py --phase decode --dtype bf16 "
               "--lengths 4K,16K,32K --page 0,1,16 --threads 1,all\n"
               "  python3 tools/torch_compare.py --phase serve --dtype bf16 "
               "--threads bench",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=["prefill", "decode", "serve", "all"],
                        default="all", help="all: prefill and decode")
    parser.add_argument("--preset", type=lambda t: parse_list(t),
                        default=["llama3-8b"],
                        help="comma-separated presets (tools/common/presets.c)"
                             "; default llama3-8b")
    parser.add_argument("--dtype", type=lambda t: parse_list(t),
                        help="comma-separated of f32, f16, bf16 (q, k, v and "
                             "out); default f32,bf16, but bf16 for serve and "
                             "paged decode (the dtype flashcpu_bench "
                             "registers them in)")
    parser.add_argument("--threads", type=lambda t: parse_list(t),
                        default=["1", "all"],
                        help="comma-separated thread counts, 'all' for every "
                             "core flashcpu uses, 'bench' for every count "
                             "flashcpu_bench registers; default 1,all")
    parser.add_argument("--lengths", type=lambda t: parse_list(t, parse_length),
                        help="prefill: L = S; decode: kv (e.g. 1K,16K); "
                             "serve: the longest decode request's kv; "
                             "default prefill 512,2048,4096, decode "
                             "1K,16K,32K, serve 32K")
    parser.add_argument("--batch", type=lambda t: parse_list(t, int),
                        default=[1], help="decode batch sizes (1 or 8: "
                        "batch 8 mixes kv lengths from kv/8 to kv; 64 with "
                        "--shortest 256 and --lengths 4K); default 1")
    parser.add_argument("--shortest", type=int, default=0,
                        help="decode: kv lengths spread from this to "
                             "--lengths (flashcpu_bench's /from:); serve: "
                             "the shortest decode request (default "
                             f"{SERVE_SHORTEST_KV})"),
    parser.add_argument("--page", type=lambda t: parse_list(t, int),
                        help="page sizes of paged K/V, 0 for contiguous "
                             "(flashcpu_bench: decode 1 and 16 at kv 4K, "
                             "16K, 32K, llama3-8b bf16 batch 1; serve 16); "
                             "default decode 0, serve 16,0")
    parser.add_argument("--requests", type=lambda t: parse_list(t, int),
                        default=[SERVE_REQUESTS],
                        help=f"serve: decode requests, kv lengths from "
                             f"{SERVE_SHORTEST_KV} to --lengths; default "
                             f"{SERVE_REQUESTS}")
    parser.add_argument("--chunk", type=int, default=SERVE_CHUNK,
                        help=f"serve: rows of the prefill chunk; default "
                             f"{SERVE_CHUNK}")
    parser.add_argument("--prefix", type=int, default=SERVE_PREFIX,
                        help=f"serve: keys cached before the chunk; default "
                             f"{SERVE_PREFIX}")
    parser.add_argument("--kv-dtype", type=lambda t: parse_list(t),
                        help="decode on quantized K/V of these dtypes "
                             "(i8, u8, f8_e4m3, f8_e5m2, q8_0; bf16 q); torch "
                             "runs the bf16 cache")
    parser.add_argument("--mask", type=lambda t: parse_list(t),
                        default=["causal"], help="prefill masks: causal, "
                        "none; default causal")
    parser.add_argument("--reps", type=int, default=5,
                        help="repetitions of both sides (median, min, max); "
                             "default 5")
    parser.add_argument("--min-time", type=float, default=0.2,
                        help="seconds each repetition runs at least; "
                             "default 0.2")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed torch calls per case and thread count "
                             "(they also size each repetition); default 2")
    parser.add_argument("--gqa", choices=["auto", "repeat"], default="auto",
                        help="auto: enable_gqa where torch has it; repeat: "
                             "K/V repeated per query head (untimed)")
    parser.add_argument("--bench", default=DEFAULT_BENCH,
                        help="flashcpu_bench binary; default %(default)s")
    parser.add_argument("--out-json", help="also write the results here")
    parser.add_argument("--skip-torch", action="store_true",
                        help="run only the flashcpu side (no torch needed)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the cases, the flashcpu_bench command "
                             "and what torch would run; run neither (no "
                             "torch needed)")
    args = parser.parse_args(argv)
    if args.dtype is None:
        paged = args.phase == "serve" or any(args.page or [])
        args.dtype = ["bf16"] if paged or args.kv_dtype else ["f32", "bf16"]
    if args.reps < 1 or args.warmup < 1:
        parser.error("--reps and --warmup must be at least 1")
    for dtype in args.dtype:
        if dtype not in DTYPE_BYTES:
            parser.error(f"unknown dtype {dtype!r}")
    for kv_dtype in args.kv_dtype or []:
        if kv_dtype not in KV_DTYPES:
            parser.error(f"unknown kv dtype {kv_dtype!r}; known: "
                         + ", ".join(KV_DTYPES))
    if args.kv_dtype and (args.dtype != ["bf16"] or (
            args.phase == "decode" and any(args.page or [])) or (
            args.phase == "serve" and args.page != [16]) or
            args.phase not in ("decode", "serve")):
        parser.error("--kv-dtype: contiguous decode, or serve on --page 16, "
                     "with --dtype bf16 only (the cases flashcpu_bench "
                     "registers)")
    for mask in args.mask:
        if mask not in ("causal", "none"):
            parser.error(f"unknown mask {mask!r}")
    for batch in args.batch:
        if batch not in (1, 8) and not (batch == 64 and args.shortest):
            parser.error("flashcpu_bench registers decode batch 1 and 8, "
                         "and 64 with --shortest")
    for page in args.page or []:
        if page < 0:
            parser.error("--page sizes must be 0 (contiguous) or more")
    if min(args.requests) < 1 or args.chunk < 1 or args.prefix < 0:
        parser.error("--requests and --chunk must be at least 1, --prefix 0")
    return args


def resolve_threads(requested, registered):
    counts = set()
    for item in requested:
        if item == "all":
            counts.add(registered[-1])
        elif item == "bench":
            counts.update(registered)
        else:
            counts.add(int(item))
    missing = sorted(counts - set(registered))
    if missing:
        sys.exit(f"torch_compare: flashcpu_bench has no cases at threads "
                 f"{missing}; it registers {registered}")
    return sorted(counts)


def dry_run(args, cases):
    """The cases and commands of a run, without running them."""
    have_bench = os.access(args.bench, os.X_OK)
    if have_bench:
        threads = resolve_threads(args.threads, bench_threads(args.bench))
        available = set(re.sub(r"/real_time$", "", line.strip()) for line in
                        run_bench_listing(args.bench, ".").splitlines())
    else:
        print(f"(no flashcpu_bench at {args.bench}: thread counts as given, "
              f"names not checked)")
        threads = [int(n) if n.isdigit() else n for n in args.threads]
        available = None
    gqa = args.gqa != "repeat"
    names = []
    for case in cases:
        print(f"{case_name(case, '<n>')}\n  torch: "
              f"{describe_torch(case, gqa)}")
        for n in threads:
            name = case_name(case, n)
            names.append(name)
            if available is not None and name not in available:
                print(f"  flashcpu_bench has no case {name}")
    escaped = "|".join(escape_regex(name) for name in names)
    print(f"threads: {', '.join(str(n) for n in threads)}\nflashcpu: "
          f"{args.bench} '--benchmark_filter=^({escaped})(/real_time)?$' "
          f"--benchmark_format=json --benchmark_repetitions={args.reps} "
          f"--benchmark_min_time={args.min_time}")
    return 0


def main(argv):
    args = parse_args(argv)
    presets = load_presets()
    for name in args.preset:
        if name not in presets:
            sys.exit(f"torch_compare: unknown preset {name!r}; known: "
                     + ", ".join(presets))
    cases = build_cases(args, presets)
    if args.dry_run:
        return dry_run(args, cases)
    torch = None if args.skip_torch else import_torch()  # fail before work
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"torch_compare: no flashcpu_bench at {args.bench} "
                 f"(build it, or pass --bench PATH)")
    threads = resolve_threads(args.threads, bench_threads(args.bench))
    work = [(case, n) for case in cases for n in threads]
    if not work:
        sys.exit("torch_compare: no cases")
    names = [case_name(case, n) for case, n in work]
    available = set(re.sub(r"/real_time$", "", line.strip()) for line in
                    run_bench_listing(args.bench, ".").splitlines())
    unknown = [name for name in names if name not in available]
    if unknown:
        sys.exit("torch_compare: flashcpu_bench has no case " + unknown[0])

    context, flashcpu_runs = run_flashcpu(args.bench, names, args)
    llc = parse_size(context.get("llc_total")) or llc_bytes_from_sysfs() or (64 << 20)
    runner, torch_line = None, "torch: not run (--skip-torch)"
    if torch is not None:
        runner = TorchRunner(torch, args.gqa, llc, args.min_time, args.reps,
                             args.warmup)
        torch_line = (f"torch {torch.__version__}: GQA by {runner.gqa_mode}; "
                      f"decode rotates over >= {MIN_LAYERS} KV caches and >= "
                      f"{CACHE_MULTIPLE}x the last-level cache "
                      f"({llc >> 20} MiB) within a quarter of RAM, so it is "
                      f"not timed from cache")

    rows = []
    for (case, n), name in zip(work, names):
        run = flashcpu_runs.get(name, {})
        flash = summary(run.get("ms"))
        ceiling = (statistics.median(run["ceiling_pct"])
                   if run.get("ceiling_pct") else None)
        torch_stats, note = None, "skipped (--skip-torch)"
        if runner is not None:
            print(f"torch: {name}", file=sys.stderr)
            samples, note = runner.run(case, n)
            torch_stats = summary(samples)
        ratio = (torch_stats["median"] / flash["median"]
                 if flash and torch_stats else None)
        rows.append({
            "case": name, "flashcpu": flash, "torch": torch_stats,
            "ratio": ratio, "flashcpu_ceiling_pct": ceiling,
            "torch_ceiling_pct": ceiling / ratio if ratio and ceiling else None,
            "flashcpu_error": run.get("error"), "flashcpu_label": run.get("label"),
            "torch_note": note})

    print()
    print(torch_line)
    print("flashcpu/torch: throughput ratio (torch median time / flashcpu "
          "median time; > 1: flashcpu is faster); % ceil: of the read "
          "bandwidth (decode, serve) or, for prefill, the peak of the unit "
          "flashcpu's kernel computes on (fp32 FMA; AMX tiles or VDPBF16PS "
          "for bf16 where it runs on them) flashcpu_bench measured in this "
          "run, for the same useful bytes or FLOPs.")
    if any(case["phase"] in ("decode", "serve") for case, _ in work):
        print("decode and serve: both sides rotate over layer-sized KV "
              "caches (flashcpu: label layers:N; torch: see notes), so "
              "neither is timed from the last-level cache.")
    if any(case["page"] for case, _ in work):
        print("page:N: flashcpu on paged K/V (flashcpu_attention_paged); "
              "torch has no paged attention and runs contiguous K/V, once "
              "per shape and thread count.")
    if any(case["phase"] == "serve" for case, _ in work):
        print("serve: torch calls SDPA once per request on that request's "
              "contiguous K/V; flashcpu makes one paged call (page:N) or "
              "two contiguous calls (the decode batch, then the chunk).")
    print_table(rows, sys.stdout)
    if args.out_json:
        with open(args.out_json, "w", encoding="utf-8") as out:
            json.dump({"flashcpu_context": context,
                       "torch_version": torch.__version__ if torch else None,
                       "gqa": runner.gqa_mode if runner else None,
                       "llc_bytes": llc, "reps": args.reps,
                       "min_time_s": args.min_time, "results": rows},
                      out, indent=2)
        print(f"wrote {args.out_json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
