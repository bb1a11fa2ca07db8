#!/usr/bin/env bash
# Runs on the device machine, from the repository root, after bundle.sh
# built build-device/ here. Writes everything under $OUT (or out/ when OUT
# is unset).
#   run.sh PARTS [google-benchmark filter]
# PARTS is a comma-separated list of:
#   info, tests, runtime (launch and barrier overheads), cli (flashcpu run
#   with its defaults), bench (flashcpu_bench with the filter, 5
#   repetitions), all (those five);
#   bench-prefill  issue 4 target cases only: llama3-8b L = S = 4096 causal,
#                  f32 and bf16, 1 thread and all threads
#   bench-decode   issue 5 target cases only: llama3-8b bf16 decode, kv 1K,
#                  16K, 32K, batch 1, 1 thread and all threads
#   torch          torch-prefill and torch-decode:
#   torch-prefill  tools/torch_compare.py on the bench-prefill cases
#   torch-decode   tools/torch_compare.py on the bench-decode cases
#   ab-decode      the bench-decode cases through `flashcpu run`, old and
#                  new alternating, two rounds: the old build is build-old/
#                  from build_old.sh COMMIT (carry it beside build-device);
#                  AB_ARGS adds options to both sides (AB_ARGS='--isa avx2')
# (the last five run only when named: they take minutes). The torch parts use
# /opt/torch/.venv/bin/python3 where it exists, else python3.
set -uo pipefail
parts=",${1:-all},"
filter=${2:-}
out=${OUT:-out}
mkdir -p "$out"
# FLASHCPU_DEVICE_BUILD: another build folder (to try this script locally).
build=${FLASHCPU_DEVICE_BUILD:-build-device}
bench="$build/bench/flashcpu_bench"
export LD_LIBRARY_PATH="$PWD/$build/bundle-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
want() { [[ $parts == *",$1,"* || $parts == *",all,"* ]]; }
named() { [[ $parts == *",$1,"* ]]; }
status=0
{
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L[123]'
  echo "nproc: $(nproc)"
} | tee "$out/machine.txt"

# The largest thread count flashcpu_bench registers (one per allowed core).
all_threads() {
  "$bench" --benchmark_list_tests \
    --benchmark_filter='^prefill/llama3-8b/f32/L:512/S:512/B:1/mask:causal/' \
    2>/dev/null | sed -n 's|.*/threads:\([0-9]*\).*|\1|p' | sort -n | tail -1
}
# flashcpu_bench on one filter, 5 repetitions, text and JSON under $out.
run_bench() { # name filter
  "$bench" --benchmark_filter="$2" \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/$1.json" --benchmark_out_format=json 2>&1 |
    tee "$out/$1.txt" || status=1
}
python_with_torch() {
  if [ -x /opt/torch/.venv/bin/python3 ]; then
    echo /opt/torch/.venv/bin/python3
  else
    echo python3
  fi
}
# The issue targets, as filters and as torch_compare.py options.
threads_all=""
if named bench-prefill || named bench-decode || named torch ||
    named torch-prefill || named torch-decode; then
  threads_all=$(all_threads)
  [ -n "$threads_all" ] || { echo "no flashcpu_bench cases listed" >&2; exit 1; }
fi
prefill_filter="^prefill/llama3-8b/(f32|bf16)/L:4096/S:4096/B:1/mask:causal/threads:(1|$threads_all)/"
decode_filter="^decode/llama3-8b/bf16/L:1/S:(1024|16384|32768)/B:1/mask:causal/threads:(1|$threads_all)/"
torch_compare() { # name options...
  local name=$1 python
  shift
  python=$(python_with_torch)
  echo "== $name with $python"
  "$python" tools/torch_compare.py --bench "$bench" --threads "1,all" \
    --reps 5 --out-json "$out/$name.json" "$@" 2>&1 |
    tee "$out/$name.txt" || status=1
}

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
  "$bench" ${filter:+--benchmark_filter="$filter"} \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/bench.json" --benchmark_out_format=json 2>&1 |
    tee "$out/bench.txt" || status=1
fi
if named bench-prefill; then
  run_bench bench-prefill "$prefill_filter"
fi
if named bench-decode; then
  run_bench bench-decode "$decode_filter"
fi
if named torch || named torch-prefill; then
  torch_compare torch-prefill --phase prefill --preset llama3-8b \
    --dtype f32,bf16 --lengths 4096 --mask causal
fi
if named torch || named torch-decode; then
  torch_compare torch-decode --phase decode --preset llama3-8b \
    --dtype bf16 --lengths 1K,16K,32K --batch 1
fi
if named ab-decode; then
  old=build-old
  if [ ! -x "$old/tools/flashcpu" ]; then
    echo "ab-decode: no $old/tools/flashcpu (tools/device/build_old.sh COMMIT)" >&2
    status=1
  else
    all=$(nproc)
    {
      echo "old: $(cat "$old/COMMIT" 2>/dev/null || echo unknown); options: ${AB_ARGS:-none}"
      for round in 1 2; do
        for side in old new; do
          cli="$build/tools/flashcpu"
          libs="$PWD/$build/bundle-lib"
          if [ "$side" = old ]; then
            cli="$old/tools/flashcpu"
            libs="$PWD/$old/src:$libs"
          fi
          for kv in 1024 16384; do
            for threads in 1 "$all"; do
              printf '%s round %s kv %s threads %s: ' "$side" "$round" "$kv" "$threads"
              # Both sides without the tools' own spinning OpenMP threads.
              OMP_WAIT_POLICY=passive LD_LIBRARY_PATH="$libs" "$cli" run \
                --phase decode --kv "$kv" --threads "$threads" ${AB_ARGS:-} 2>&1 |
                grep -E '^  (time|rate)' | tr -s ' ' | tr '\n' ' '
              echo
            done
          done
        done
      done
    } 2>&1 | tee "$out/ab-decode.txt"
  fi
fi
exit $status
