"""The cases tools/torch_compare.py runs, named as flashcpu_bench names
them, and the flashcpu side of a comparison: the model presets read from
tools/common/presets.c, each case's request lengths, and flashcpu_bench
listed and run (JSON) on them."""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS_SOURCE = os.path.join(ROOT, "tools", "common", "presets.c")
DEFAULT_BENCH = os.path.join(ROOT, "build", "bench", "flashcpu_bench")
DEFAULT_LENGTHS = {"prefill": [512, 2048, 4096], "decode": [1024, 16384, 32768],
                   "serve": [32768]}
# The serving step's defaults, as flashcpu_bench registers them
# (bench/bench_cases.cc): 32 decode requests, kv 1K to S, a 512-row chunk
# onto 4096 cached keys, pages of 16 tokens and contiguous.
SERVE_REQUESTS, SERVE_CHUNK, SERVE_PREFIX = 32, 512, 4096
SERVE_SHORTEST_KV = 1024
DEFAULT_SERVE_PAGES = [16, 0]
# Decode rotation, as tools/common/workload.c: at least 32 layers and 4x the
# last-level cache, within a quarter of RAM.
MIN_LAYERS, CACHE_MULTIPLE = 32, 4
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
# Quantized K/V of the decode cases (flashcpu_bench's kv:<dtype>).
KV_DTYPES = ("i8", "u8", "f8_e4m3", "f8_e5m2", "q8_0")


# ----------------------------------------------------------------- presets
def load_presets(path=PRESETS_SOURCE):
    """The preset table of tools/common/presets.c, so that there is one."""
    pattern = re.compile(
        r'\{"([^"]+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*(true|false),\s*(-?\d+),'
        r'\s*([0-9.]+)f?,')
    presets = {}
    try:
        with open(path, encoding="utf-8") as source:
            for match in pattern.finditer(source.read()):
                name, hq, hkv, dim, causal, window, softcap = match.groups()
                presets[name] = {
                    "name": name, "hq": int(hq), "hkv": int(hkv),
                    "dim": int(dim), "causal": causal == "true",
                    "window": int(window), "softcap": float(softcap)}
    except OSError as error:
        sys.exit(f"torch_compare: cannot read the presets ({error})")
    if not presets:
        sys.exit(f"torch_compare: no presets found in {path}")
    return presets


# -------------------------------------------------------------------- cases
def case_name(case, threads):
    prefix = (f"/prefix:{case['prefix']}" if case["phase"] == "serve"
              else "")
    page = f"/page:{case['page']}" if case["page"] else ""
    kv_dtype = f"/kv:{case['kv_dtype']}" if case.get("kv_dtype") else ""
    shortest = (f"/from:{case['shortest']}" if case.get("shortest")
                else "")
    return (f"{case['phase']}/{case['preset']['name']}/{case['dtype']}"
            f"{kv_dtype}/L:{case['rows']}{prefix}/S:{case['kv']}{shortest}"
            f"/B:{case['batch']}/mask:{case['mask']}{page}/threads:{threads}")


def mixed_lengths(kv, batch):
    """As workload.c: kv / 8 for the first sequence up to kv for the last."""
    return spread_lengths(kv // 8, kv, batch)


def spread_lengths(shortest, kv, batch):
    """As workload.c's spread_length: shortest (at least 1, at most kv) for
    the first sequence, kv for the last, evenly between."""
    if batch == 1:
        return [kv]
    shortest = min(max(shortest, 1), kv)
    return [shortest + (kv - shortest) * b // (batch - 1) for b in range(batch)]


def batch_lengths(case):
    """Each sequence's kv length of a decode case: from its shortest
    (flashcpu_bench's /from:) or kv / 8 up to kv."""
    if case.get("shortest"):
        return spread_lengths(case["shortest"], case["kv"], case["batch"])
    return mixed_lengths(case["kv"], case["batch"])


def serve_requests(case):
    """(rows, keys) of each request of a serving step: the decode requests,
    then the chunk."""
    lengths = spread_lengths(case.get("shortest") or SERVE_SHORTEST_KV,
                             case["kv"], case["batch"])
    return ([(1, length) for length in lengths] +
            [(case["rows"], case["prefix"] + case["rows"])])


def build_cases(args, presets):
    cases = []
    phases = ["prefill", "decode"] if args.phase == "all" else [args.phase]
    for phase in phases:
        lengths = args.lengths or DEFAULT_LENGTHS[phase]
        for preset_name in args.preset:
            preset = presets[preset_name]
            if phase != "prefill" and not preset["causal"]:
                print(f"torch_compare: {preset_name} is an encoder: no "
                      f"{phase}", file=sys.stderr)
                continue
            if phase == "serve":
                for dtype in args.dtype:
                    for length in lengths:
                        for requests in args.requests:
                            for page in args.page or DEFAULT_SERVE_PAGES:
                                for kv_dtype in args.kv_dtype or [None]:
                                    cases.append({
                                        "phase": phase, "preset": preset,
                                        "dtype": dtype, "mask": "causal",
                                        "batch": requests,
                                        "rows": args.chunk,
                                        "prefix": args.prefix, "kv": length,
                                        "page": page, "kv_dtype": kv_dtype,
                                        "shortest": args.shortest})
                continue
            masks = ["causal"] if phase == "decode" else args.mask
            kv_dtypes = ((args.kv_dtype or [None]) if phase == "decode"
                         else [None])
            pages = (args.page or [0]) if phase == "decode" else [0]
            for dtype in args.dtype:
                for length in lengths:
                    for mask in masks:
                        if mask == "causal" and not preset["causal"]:
                            continue
                        for batch in (args.batch if phase == "decode" else [1]):
                            for page in pages:
                                for kv_dtype in kv_dtypes:
                                    cases.append({
                                        "phase": phase, "preset": preset,
                                        "dtype": dtype, "mask": mask,
                                        "batch": batch,
                                        "rows": 1 if phase == "decode" else length,
                                        "kv": length, "page": page,
                                        "kv_dtype": kv_dtype,
                                        "shortest": (args.shortest
                                                     if phase == "decode"
                                                     else 0)})
    return cases


def torch_key(case):
    """What torch runs for a case: the same for every page size and K/V
    dtype (torch runs the bf16 cache)."""
    return (case["phase"], case["preset"]["name"], case["dtype"], case["mask"],
            case["batch"], case["rows"], case["kv"], case.get("prefix", 0),
            case.get("shortest", 0))


# ----------------------------------------------------------- flashcpu side
def bench_threads(bench):
    """The thread counts flashcpu_bench registers (1, powers of two, all)."""
    listing = run_bench_listing(bench, "^prefill/llama3-8b/f32/L:512/S:512/")
    counts = sorted({int(n) for n in re.findall(r"/threads:(\d+)", listing)})
    if not counts:
        sys.exit("torch_compare: flashcpu_bench listed no cases")
    return counts


def run_bench_listing(bench, pattern):
    result = subprocess.run(
        [bench, "--benchmark_list_tests", f"--benchmark_filter={pattern}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        check=False)
    if result.returncode != 0:
        sys.exit(f"torch_compare: {bench} --benchmark_list_tests failed")
    return result.stdout


def run_flashcpu(bench, names, args):
    """One flashcpu_bench run over every case: per-repetition times."""
    escaped = "|".join(escape_regex(name) for name in names)
    command = [bench, f"--benchmark_filter=^({escaped})(/real_time)?$",
               "--benchmark_format=json",
               f"--benchmark_repetitions={args.reps}",
               f"--benchmark_min_time={args.min_time}"]
    print("flashcpu: " + " ".join(command[:1] + command[2:]) +
          f" (filter: {len(names)} cases)", file=sys.stderr)
    # stderr (ceilings, warnings) goes straight through.
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True,
                            check=False)
    if result.returncode != 0:
        sys.exit(f"torch_compare: flashcpu_bench exited {result.returncode}")
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        sys.exit("torch_compare: flashcpu_bench printed no JSON (see above)")
    runs = {}
    for entry in report.get("benchmarks", []):
        if entry.get("run_type", "iteration") != "iteration":
            continue
        name = entry["run_name"].replace("/real_time", "")
        record = runs.setdefault(name, {"ms": [], "ceiling_pct": [],
                                        "GBps": [], "GFLOPs": [],
                                        "error": None, "label": ""})
        if entry.get("error_occurred"):
            record["error"] = entry.get("error_message", "error")
            continue
        record["ms"].append(to_ms(entry["real_time"], entry["time_unit"]))
        for counter in ("ceiling_pct", "GBps", "GFLOPs"):
            if counter in entry:
                record[counter].append(entry[counter])
        record["label"] = entry.get("label", "")
    return report.get("context", {}), runs


def escape_regex(text):
    """For google-benchmark's POSIX extended regex, as bench_cases.cc does
    (Python's re.escape writes escapes such as \\- that POSIX rejects)."""
    return "".join("\\" + c if c in ".+*?()[]{}|^$\\" else c for c in text)


def to_ms(value, unit):
    return value * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def parse_size(text):
    """'32 MiB' (toolkit_format_bytes) -> bytes; None when unreadable."""
    match = re.match(r"\s*([0-9.]+)\s*(B|KiB|MiB|GiB|TiB)", text or "")
    if not match:
        return None
    scale = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4}[match.group(2)]
    return int(float(match.group(1)) * 1024 ** scale)
