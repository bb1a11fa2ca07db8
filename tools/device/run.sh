#!/usr/bin/env bash
# Runs on the device machine, from the repository root, after bundle.sh
# built build-device/ here. Writes everything under $OUT (or out/ when OUT
# is unset).
#   run.sh PARTS [google-benchmark filter]
# PARTS is a comma-separated list of: info, tests, runtime (launch and
# barrier overheads), cli (flashcpu run with its defaults), bench
# (flashcpu_bench with the filter, 5 repetitions), or all.
set -uo pipefail
parts=",${1:-all},"
filter=${2:-}
out=${OUT:-out}
mkdir -p "$out"
build=build-device
export LD_LIBRARY_PATH="$PWD/$build/bundle-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
want() { [[ $parts == *",$1,"* || $parts == *",all,"* ]]; }
status=0
{
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L[123]'
  echo "nproc: $(nproc)"
} | tee "$out/machine.txt"
if want info; then
  "$build/tools/flashcpu" info 2>&1 | tee "$out/info.txt" || status=1
fi
if want tests; then
  for t in "$build"/tests/flashcpu_*tests "$build"/tests/runtime/flashcpu_*tests; do
    [ -x "$t" ] || continue
    echo "== $t"
    "$t" --gtest_brief=1 > "$out/test-log.txt" 2>&1 || { status=1; tail -40 "$out/test-log.txt"; }
    tail -4 "$out/test-log.txt"
  done 2>&1 | tee "$out/tests.txt"
fi
if want runtime; then
  "$build/bench/flashcpu_runtime_bench" --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 2>&1 |
    tee "$out/runtime-bench.txt" || status=1
fi
if want cli; then
  "$build/tools/flashcpu" run 2>&1 | tee "$out/run.txt" || status=1
fi
if want bench; then
  "$build/bench/flashcpu_bench" ${filter:+--benchmark_filter="$filter"} \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/bench.json" --benchmark_out_format=json 2>&1 |
    tee "$out/bench.txt" || status=1
fi
exit $status
