#!/usr/bin/env bash
# Runs the test suite and benchmarks of a bundle made by tools/bundle.sh, on
# any x86-64 Linux host, from the repository root. Results (text and JSON) go
# into one folder, with the host's lscpu summary in machine.txt.
#
#   tools/run_suite.sh [-b BUNDLE] [-o RESULTS] PARTS [BENCHMARK_FILTER]
#
#   -b BUNDLE    the bundle folder (default: $FLASHCPU_BUNDLE, else
#                build-bundle)
#   -o RESULTS   where results go (default: $FLASHCPU_RESULTS, else
#                BUNDLE/results)
#
# PARTS is a comma-separated list of:
#   info           `flashcpu info`: the CPU, its features, caches, the plan
#   tests          every test binary of the bundle (GoogleTest), each in
#                  as many shards as the host has cores, run side by side
#   runtime        flashcpu_runtime_bench: launch and barrier overheads
#   cli            `flashcpu run` with its defaults (checked against the
#                  float64 oracle)
#   bench          flashcpu_bench with BENCHMARK_FILTER (default: its
#                  default set), 5 repetitions, JSON
#   all            the five above
#   bench-prefill  flashcpu_bench on the prefill reference cases: llama3-8b
#                  L = S = 4096 causal, f32 and bf16, 1 thread and all
#   bench-decode   flashcpu_bench on the decode reference cases: llama3-8b
#                  bf16, kv 1K, 16K and 32K, batch 1, 1 thread and all
#   bench-paged    flashcpu_bench on paged decode next to contiguous:
#                  llama3-8b bf16, kv 4K, 16K and 32K, pages of 1 and 16
#                  tokens, 1 thread and all
#   bench-serve    flashcpu_bench on the serving step (32 decode requests,
#                  kv 1K to 32K, and a 512-row chunk onto 4096 cached keys),
#                  paged and contiguous, every thread count
#   torch          torch-prefill and torch-decode
#   torch-prefill  tools/torch_compare.py on the bench-prefill cases
#   torch-decode   tools/torch_compare.py on the bench-decode cases
#   torch-serve    tools/torch_compare.py on the serving step, 1 thread and
#                  all
#   ab-decode      the bench-decode cases through `flashcpu run`, an older
#                  build and this bundle alternating, two rounds: the older
#                  build is the folder tools/build_commit.sh made ($OLD_BUILD,
#                  default build-old, copied beside the bundle); AB_ARGS
#                  adds options to both sides (AB_ARGS='--isa avx2')
# The parts after `all` run only when named: they take minutes. The torch parts run
# $PYTHON (default python3), which needs PyTorch.
#
# Times on a shared machine move between runs: compare what one run of this
# script measured (its ceilings, its torch, its A/B), not runs of two.
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
build=${FLASHCPU_BUNDLE:-build-bundle}
out=${FLASHCPU_RESULTS:-}
while getopts 'b:o:h' option; do
  case $option in
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { usage >&2; exit 2; }
parts=",$1,"
filter=${2:-}
out=${out:-$build/results}
mkdir -p "$out"
[ -x "$build/tools/flashcpu" ] ||
  { echo "run_suite.sh: no $build/tools/flashcpu (tools/bundle.sh $build)" >&2; exit 1; }
case "$build" in /*) libs="$build/bundle-lib" ;; *) libs="$PWD/$build/bundle-lib" ;; esac
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench="$build/bench/flashcpu_bench"
python=${PYTHON:-python3}
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
# The reference cases, as filters and as torch_compare.py options.
threads_all=""
if named bench-prefill || named bench-decode || named bench-paged || named torch ||
    named torch-prefill || named torch-decode; then
  threads_all=$(all_threads)
  [ -n "$threads_all" ] || { echo "no flashcpu_bench cases listed" >&2; exit 1; }
fi
prefill_filter="^prefill/llama3-8b/(f32|bf16)/L:4096/S:4096/B:1/mask:causal/threads:(1|$threads_all)/"
decode_filter="^decode/llama3-8b/bf16/L:1/S:(1024|16384|32768)/B:1/mask:causal/threads:(1|$threads_all)/"
paged_filter="^decode/llama3-8b/bf16/L:1/S:(4096|16384|32768)/B:1/mask:causal/(page:(1|16)/)?threads:(1|$threads_all)/"
serve_filter="^serve/llama3-8b/bf16/L:512/"
torch_compare() { # name options...
  local name=$1
  shift
  echo "== $name with $python"
  "$python" tools/torch_compare.py --bench "$bench" --threads "1,all" \
    --reps 5 --out-json "$out/$name.json" "$@" 2>&1 |
    tee "$out/$name.txt" || status=1
}

if want info; then
  "$build/tools/flashcpu" info 2>&1 | tee "$out/info.txt" || status=1
fi
# One test binary in GoogleTest's shards, one per core, side by side (the
# kernel suite takes minutes on one core): its log is the shards' logs in
# turn, then the sums of their counts.
run_test_binary() { # binary name
  local shards i pids=() failed=0
  shards=$(nproc)
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$1" --gtest_brief=1 \
      > "$out/test-$2.shard$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { failed=1; echo "FAILED: $2 shard $i of $shards"; }
  done
  for ((i = 0; i < shards; i++)); do
    cat "$out/test-$2.shard$i.log"
    rm -f "$out/test-$2.shard$i.log"
  done > "$out/test-$2.log"
  [ "$failed" -eq 0 ] || grep -E '^\[  FAILED  \]|Failure' "$out/test-$2.log" | head -40
  awk '/^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ test/ { sum[$2] += $4 }
       END { printf "%s: %d passed, %d skipped, %d failed (%d shards)\n", name,
             sum["PASSED"], sum["SKIPPED"], sum["FAILED"], shards }' \
    name="$2" shards="$shards" "$out/test-$2.log"
}
if want tests; then
  while read -r t; do
    echo "== $t"
    run_test_binary "$t" "$(basename "$t")"
  done < <(find "$build/tests" -maxdepth 3 -type f -perm -u+x \
             -name 'flashcpu_*tests' | sort) 2>&1 | tee "$out/tests.txt"
  grep -q FAILED "$out/tests.txt" && status=1
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
if named bench-paged; then
  run_bench bench-paged "$paged_filter"
fi
if named bench-serve; then
  run_bench bench-serve "$serve_filter"
fi
if named torch || named torch-prefill; then
  torch_compare torch-prefill --phase prefill --preset llama3-8b \
    --dtype f32,bf16 --lengths 4096 --mask causal
fi
if named torch || named torch-decode; then
  torch_compare torch-decode --phase decode --preset llama3-8b \
    --dtype bf16 --lengths 1K,16K,32K --batch 1
fi
if named torch-serve; then
  torch_compare torch-serve --phase serve --preset llama3-8b --dtype bf16
fi
if named ab-decode; then
  old=${OLD_BUILD:-build-old}
  if [ ! -x "$old/tools/flashcpu" ]; then
    echo "ab-decode: no $old/tools/flashcpu (tools/build_commit.sh COMMIT)" >&2
    status=1
  else
    case "$old" in /*) old_libs="$old/src" ;; *) old_libs="$PWD/$old/src" ;; esac
    all=$(nproc)
    {
      echo "old: $(cat "$old/COMMIT" 2>/dev/null || echo unknown); options: ${AB_ARGS:-none}"
      for round in 1 2; do
        for side in old new; do
          cli="$build/tools/flashcpu"
          side_libs="$libs"
          if [ "$side" = old ]; then
            cli="$old/tools/flashcpu"
            side_libs="$old_libs:$libs"
          fi
          for kv in 1024 16384; do
            for threads in 1 "$all"; do
              printf '%s round %s kv %s threads %s: ' "$side" "$round" "$kv" "$threads"
              # Both sides without the tools' own spinning OpenMP threads.
              # AB_ARGS is split into words on purpose.
              # shellcheck disable=SC2086
              OMP_WAIT_POLICY=passive LD_LIBRARY_PATH="$side_libs" "$cli" run \
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
