#!/usr/bin/env bash
# Runs on the device machine, from the repository root, after bundle.sh
# built build-device/ here. Writes everything under $OUT (or out/ when OUT
# is unset). Usage: run.sh [tests|bench|info|all] [google-benchmark filter]
set -uo pipefail
what=${1:-all}
filter=${2:-.}
out=${OUT:-out}
mkdir -p "$out"
build=build-device
export LD_LIBRARY_PATH="$PWD/$build/bundle-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L[123]'
  nproc
} | tee "$out/machine.txt"
status=0
if [[ $what == info || $what == all ]]; then
  "$build/tools/flashcpu" info 2>&1 | tee "$out/info.txt" || status=1
fi
if [[ $what == tests || $what == all ]]; then
  for t in "$build"/tests/flashcpu_*tests*; do
    [ -x "$t" ] || continue
    echo "== $t"
    "$t" --gtest_brief=1 2>&1 | tail -5
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done | tee "$out/tests.txt"
fi
if [[ $what == bench || $what == all ]]; then
  "$build/bench/flashcpu_bench" --benchmark_filter="$filter" \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/bench.json" --benchmark_out_format=json 2>&1 |
    tee "$out/bench.txt" || status=1
fi
exit $status
