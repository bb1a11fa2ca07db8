#!/usr/bin/env python3
"""A roofline chart of a flashcpu_bench run.

Reads the JSON that flashcpu_bench writes with
  --benchmark_out=FILE --benchmark_out_format=json
and draws, on log-log axes, one point per case at its arithmetic intensity
(GFLOPs / GBps: flops per byte moved, as flashcpu_bench counts them) and its
achieved GFLOP/s, labelled with the case and its percent of the ceiling that
binds it. The ceilings flashcpu_bench measured in the same run (JSON context
keys ceiling_threads:<n>_read_GBps and ceiling_threads:<n>_fma_GFLOPs) are
drawn per thread count: the read-bandwidth slope (GFLOP/s = intensity x
GB/s) and the fp32 FMA roof, meeting at the ridge point.

With --benchmark_repetitions the medians are plotted (other aggregates and
the single repetitions are skipped).

Writes PREFIX.svg and PREFIX.png. Needs matplotlib (Debian: python3-matplotlib,
then run it with /usr/bin/python3).

  tools/plot_roofline.py bench.json --out docs/roofline-mycpu \\
      --cpu "lscpu model name, N cores" --commit abc1234
"""

import argparse
import json
import re
import sys

NAME = re.compile(
    r"^(?P<phase>[a-z]+)/(?P<preset>[^/]+)/(?P<dtype>[^/]+)/L:(?P<rows>\d+)/"
    r"S:(?P<kv>\d+)/B:(?P<batch>\d+)/mask:(?P<mask>[^/]+)/"
    r"threads:(?P<threads>\d+)")
CEILING = re.compile(r"^ceiling_threads:(\d+)_(read_GBps|fma_GFLOPs|isa)$")
COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple",
           "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
MARKERS = {"decode": "o", "verify": "^", "prefill": "s"}


def short_length(value):
    """1024 -> 1K, 16384 -> 16K, 2048 -> 2K, 100 -> 100."""
    value = int(value)
    return f"{value // 1024}K" if value >= 1024 and value % 1024 == 0 \
        else str(value)


def load(path):
    with open(path, encoding="utf-8") as source:
        data = json.load(source)
    context = data.get("context", {})
    ceilings = {}
    for key, value in context.items():
        match = CEILING.match(key)
        if not match:
            continue
        threads, what = int(match.group(1)), match.group(2)
        entry = ceilings.setdefault(threads, {})
        entry[what] = value if what == "isa" else float(value)
    cases = []
    for bench in data.get("benchmarks", []):
        if bench.get("run_type") == "aggregate":
            if bench.get("aggregate_name") != "median":
                continue
        elif bench.get("repetitions", 1) > 1:
            continue  # single repetitions: their median is plotted
        if bench.get("error_occurred"):
            continue
        name = bench.get("run_name", bench["name"])
        match = NAME.match(name)
        gflops, gbps = bench.get("GFLOPs"), bench.get("GBps")
        if not match or not gflops or not gbps:
            continue
        case = match.groupdict()
        case.update(name=name, gflops=float(gflops), gbps=float(gbps),
                    intensity=float(gflops) / float(gbps),
                    ceiling_pct=bench.get("ceiling_pct"),
                    threads=int(case["threads"]))
        cases.append(case)
    return context, ceilings, cases


def label(case):
    rows = "" if case["phase"] == "decode" else f" L:{short_length(case['rows'])}"
    batch = "" if case["batch"] == "1" else f" B:{case['batch']}"
    text = (f"{case['phase']} {case['preset']} {case['dtype']}{rows}"
            f" S:{short_length(case['kv'])}{batch} t{case['threads']}")
    if case["ceiling_pct"] is not None:
        text += f" ({case['ceiling_pct']:.0f}%)"
    return text


def place_labels(figure, axes, cases):
    """Labels beside their points without overlapping each other, the
    points or the chart's edges: each label tries positions right, left,
    above and below its point, then the same further up and down, and
    takes the first that is free; a label away from its point gets a thin
    line to it."""
    from matplotlib.transforms import Bbox
    renderer = figure.canvas.get_renderer()
    frame = axes.get_window_extent(renderer)
    points = [axes.transData.transform((c["intensity"], c["gflops"]))
              for c in cases]
    taken = [Bbox.from_extents(x - 5, y - 5, x + 5, y + 5) for x, y in points]
    legend = axes.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    pixels = figure.dpi / 72.0
    order = sorted(range(len(cases)), key=lambda i: -points[i][1])
    for index in order:
        case, (x, y) = cases[index], points[index]
        probe = axes.text(0, 0, label(case), fontsize=7.5)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        width, height = extent.width, extent.height
        candidates = []
        for lift in [0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6]:
            dy = lift * (height + 2)
            candidates += [(8 * pixels, dy - height / 2),
                           (-8 * pixels - width, dy - height / 2)]
            if lift == 0:
                candidates += [(-width / 2, 6 * pixels),
                               (-width / 2, -6 * pixels - height)]
        chosen = candidates[0]
        for dx, dy in candidates:
            box = Bbox.from_bounds(x + dx, y + dy, width, height)
            inside = (box.x0 >= frame.x0 and box.x1 <= frame.x1 and
                      box.y0 >= frame.y0 and box.y1 <= frame.y1)
            if inside and not any(box.overlaps(other) for other in taken):
                chosen = (dx, dy)
                break
        dx, dy = chosen
        box = Bbox.from_bounds(x + dx, y + dy, width, height)
        taken.append(box)
        near = abs(dy + height / 2) < height
        arrow = None if near else dict(arrowstyle="-", linewidth=0.4,
                                       color="grey", shrinkA=1, shrinkB=3)
        axes.annotate(label(case), (case["intensity"], case["gflops"]),
                      xytext=((dx) / pixels, dy / pixels),
                      textcoords="offset points", fontsize=7.5,
                      ha="left", va="bottom", arrowprops=arrow)


def plot(context, ceilings, cases, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = "flashcpu"  # stable ids
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_roofline.py: needs matplotlib (Debian: apt-get install "
                 "python3-matplotlib, then run it with /usr/bin/python3)")

    thread_counts = sorted({case["threads"] for case in cases} |
                           {t for t in ceilings if not cases})
    colour = {t: COLOURS[i % len(COLOURS)] for i, t in enumerate(thread_counts)}

    intensities = [case["intensity"] for case in cases]
    ridges = [c["fma_GFLOPs"] / c["read_GBps"] for t, c in ceilings.items()
              if t in colour and c.get("read_GBps") and c.get("fma_GFLOPs")]
    low = min(intensities + ridges) / 4
    high = max(intensities + ridges) * 4
    xs = [low * (high / low) ** (i / 200) for i in range(201)]

    figure, axes = plt.subplots(figsize=(11, 7), dpi=args.dpi)
    for threads in thread_counts:
        ceiling = ceilings.get(threads)
        if not ceiling or "read_GBps" not in ceiling or "fma_GFLOPs" not in ceiling:
            continue
        read, fma = ceiling["read_GBps"], ceiling["fma_GFLOPs"]
        isa = ceiling.get("isa", "")
        axes.plot(xs, [min(fma, x * read) for x in xs], color=colour[threads],
                  linewidth=1.6,
                  label=f"{threads} thread{'s' if threads > 1 else ''}: "
                        f"read {read:.1f} GB/s, FMA {fma:.0f} GFLOP/s"
                        f"{' (' + isa + ')' if isa else ''}")
        axes.plot(xs, [x * read for x in xs], color=colour[threads],
                  linewidth=0.8, linestyle=":")
        axes.axhline(fma, color=colour[threads], linewidth=0.8, linestyle=":")

    for case in cases:
        axes.scatter(case["intensity"], case["gflops"], s=36, zorder=3,
                     color=colour[case["threads"]],
                     marker=MARKERS.get(case["phase"], "D"),
                     edgecolors="black", linewidths=0.5)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    tops = [c["fma_GFLOPs"] for t, c in ceilings.items()
            if t in colour and "fma_GFLOPs" in c]
    bottom = min([case["gflops"] for case in cases] + [low * min(
        c["read_GBps"] for t, c in ceilings.items()
        if t in colour and "read_GBps" in c)]) / 2
    axes.set_ylim(bottom, max(tops + [case["gflops"] for case in cases]) * 2)
    axes.set_xlabel("arithmetic intensity (flop per byte of K, V, Q and "
                    "output moved)")
    axes.set_ylabel("achieved GFLOP/s (4 x Hq x D x visible query-key pairs)")
    axes.grid(True, which="both", linewidth=0.3, alpha=0.5)

    cpu = args.cpu or context.get("cpu_model", "").strip() or "unknown CPU"
    date = args.date or context.get("date", "")[:10]
    version = context.get("flashcpu_version", "")
    parts = [f"flashcpu {version}".strip()]
    if args.commit:
        parts.append(f"commit {args.commit}")
    parts += [cpu, date]
    axes.set_title(args.title or "flashcpu roofline: " + ", ".join(
        p for p in parts if p), fontsize=10)
    legend = axes.legend(loc="lower right", fontsize=8, title="ceilings "
                         "measured in the same run", title_fontsize=8)
    legend.get_frame().set_alpha(0.9)
    figure.text(0.01, 0.01, "o decode   ^ verify   s prefill;  (%) = percent "
                "of the ceiling that binds the case (flashcpu_bench "
                "ceiling_pct)", fontsize=7.5)
    # Limits and layout are fixed now: place the labels in display space.
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    place_labels(figure, axes, cases)

    metadata_svg = {"Date": None}  # reproducible output for the same input
    figure.savefig(args.out + ".svg", metadata=metadata_svg)
    figure.savefig(args.out + ".png")
    plt.close(figure)
    print(f"wrote {args.out}.svg and {args.out}.png ({len(cases)} cases)")


def main():
    parser = argparse.ArgumentParser(
        description="Roofline chart (SVG and PNG) of a flashcpu_bench JSON.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The JSON: flashcpu_bench --benchmark_out=FILE "
               "--benchmark_out_format=json [--benchmark_filter=...]")
    parser.add_argument("json", help="flashcpu_bench JSON output")
    parser.add_argument("--out", default="roofline",
                        help="output prefix: writes PREFIX.svg and PREFIX.png "
                             "(default: roofline)")
    parser.add_argument("--filter", default=None,
                        help="plot only cases whose name matches this regex")
    parser.add_argument("--cpu", default=None,
                        help="CPU named in the title (default: the JSON's "
                             "cpu_model)")
    parser.add_argument("--commit", default=None,
                        help="commit named in the title")
    parser.add_argument("--date", default=None,
                        help="date named in the title (default: the run's)")
    parser.add_argument("--title", default=None, help="replaces the title")
    parser.add_argument("--dpi", type=int, default=120,
                        help="PNG resolution (default: 120)")
    args = parser.parse_args()

    context, ceilings, cases = load(args.json)
    if args.filter:
        pattern = re.compile(args.filter)
        cases = [case for case in cases if pattern.search(case["name"])]
    if not cases:
        sys.exit(f"plot_roofline.py: no flashcpu_bench cases with GFLOPs and "
                 f"GBps counters in {args.json}")
    if not ceilings:
        print("plot_roofline.py: the JSON has no ceiling_threads:* context "
              "keys; plotting the points only", file=sys.stderr)
    plot(context, ceilings, cases, args)


if __name__ == "__main__":
    main()
