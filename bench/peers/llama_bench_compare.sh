#!/usr/bin/env bash
# llama.cpp with flash attention on, with and without flashcpu's ggml
# backend, from a package that build_llama_bench.sh made (no network, no
# compiler needed):
#   1. a random-weight GGUF model shaped like Llama-3-8B's layers (32/8
#      heads of 128, hidden 4096, ffn 14336), --layers of them;
#   2. llama-bench, prompt processing (--pp tokens) and generation (--tg
#      tokens) at each depth of --contexts, for each KV cache type of --kv:
#      once on ggml's CPU backend alone, once per --launch mode with the
#      backend loaded (GGML_BACKEND_PATH; FLASHCPU_GGML_LAUNCH=pool: its
#      own threads, host: ggml's OpenMP threads);
#   3. the attention share of a step: one more run with the backend's
#      profile (FLASHCPU_GGML_PROFILE=1), its time per call times the
#      layers, over the step's time;
#   4. greedy tokens with and without the backend (llama_greedy_tokens) on
#      f32 and f16 KV caches, and where they part;
#   5. optionally (--backend-ops) ggml's test-backend-ops on FLASH_ATTN_EXT
#      through the backend.
#
#   bench/peers/llama_bench_compare.sh PACKAGE_DIR OUT_DIR [--threads N]
#     [--contexts 4096,16384,32768] [--kv f16,q8_0] [--layers 2] [--reps 3]
#     [--launch host,pool] [--pp 512] [--tg 32] [--greedy-prompt 4096]
#     [--greedy-gen 64] [--weights q8_0|f16] [--backend-ops]
#
# OUT_DIR gets summary.md (the tables), the llama-bench CSV files, the
# logs and system.txt (CPU, date, builds). The model is written to OUT_DIR
# once (about 0.8 GB with 2 layers of q8_0 weights) and reused.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
package=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
threads=$(nproc) contexts=4096,16384,32768 kvs=f16,q8_0 layers=2 reps=3
launches=host,pool pp=512 tg=32 greedy_prompt=4096 greedy_gen=64
weights=q8_0 backend_ops=0
while [ $# -gt 0 ]; do
  case $1 in
  --threads) threads=$2 ;;
  --contexts) contexts=$2 ;;
  --kv) kvs=$2 ;;
  --layers) layers=$2 ;;
  --reps) reps=$2 ;;
  --launch) launches=$2 ;;
  --pp) pp=$2 ;;
  --tg) tg=$2 ;;
  --greedy-prompt) greedy_prompt=$2 ;;
  --greedy-gen) greedy_gen=$2 ;;
  --weights) weights=$2 ;;
  --backend-ops) backend_ops=1; shift; continue ;;
  *) usage ;;
  esac
  shift 2
done

unset GGML_BACKEND_PATH FLASHCPU_GGML_LAUNCH FLASHCPU_GGML_PROFILE
export LD_LIBRARY_PATH="$package/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
module="$package/lib/libggml-flashcpu.so"
bin="$package/bin"
missing=$(ldd "$bin/llama-bench" "$module" | grep 'not found' || true)
[ -z "$missing" ] || { echo "missing libraries:"; echo "$missing"; exit 1; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
  echo "cores: $(nproc) online; threads used: $threads"
  echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  cat "$package/BUILD_INFO"
} >"$out/system.txt"
cat "$out/system.txt"

model="$out/random-llama3-8b-${layers}layers-$weights.gguf"
[ -f "$model" ] || "$bin/make_random_llama" --vocab "$package/ggml-vocab-llama-spm.gguf" \
  --out "$model" --layers "$layers" --type "$weights"

if [ "$backend_ops" -eq 1 ]; then
  echo "== test-backend-ops -o FLASH_ATTN_EXT -b FLASHCPU"
  GGML_BACKEND_PATH="$module" "$bin/test-backend-ops" -o FLASH_ATTN_EXT -b FLASHCPU \
    >"$out/backend_ops.log" 2>&1 || true
  sed 's/\x1b\[[0-9;]*m//g' "$out/backend_ops.log" | grep -E '^  FLASH_ATTN_EXT\(' >"$out/backend_ops.cases" || true
  echo "cases $(grep -c . "$out/backend_ops.cases"), passed $(grep -c ': OK$' "$out/backend_ops.cases"), failed $(grep -c 'FAIL$' "$out/backend_ops.cases"), declined $(grep -c 'not supported' "$out/backend_ops.cases")" |
    tee "$out/backend_ops.summary"
fi

# bench NAME KV DEPTH [ENV...]: one llama-bench run, its CSV in OUT_DIR.
bench() {
  local name=$1 kv=$2 depth=$3
  shift 3
  echo "== $name kv=$kv depth=$depth"
  env "$@" "$bin/llama-bench" -m "$model" -fa 1 -ctk "$kv" -ctv "$kv" \
    -t "$threads" -p "$pp" -n "$tg" -d "$depth" -r "$reps" -o csv \
    >"$out/bench-$name-$kv-$depth.csv" 2>"$out/bench-$name-$kv-$depth.log"
}

# tokens/s of the pp (n_gen 0) or tg (n_prompt 0) row of a CSV (commas
# inside quoted fields, such as cpu_info's, turned into ';' first).
rate() {
  sed -E ':a; s/^(([^"]*"[^"]*")*[^"]*"[^",]*),/\1;/; ta; s/"//g' "$1" |
    awk -F, -v want="$2" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      (want == "pp" && $col["n_gen"] == 0) || (want == "tg" && $col["n_prompt"] == 0) {
        printf "%.2f", $col["avg_ts"] }'
}

# Mean microseconds per flashcpu call of `rows` rows over up to `keys`
# keys (rounded up to 256 as the profile buckets them).
profile_us() {
  local keys=$(( ($3 + 255) / 256 * 256 ))
  sed -n "s/^flashcpu ggml profile: rows $2 keys<=$keys calls [0-9]* mean_us //p" "$1" | head -n 1
}

IFS=, read -r -a kv_list <<<"$kvs"
IFS=, read -r -a context_list <<<"$contexts"
IFS=, read -r -a launch_list <<<"$launches"
summary="$out/summary.md"
{
  echo "# llama.cpp with and without flashcpu's ggml backend"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Model: $layers layers shaped like Llama-3-8B's, $weights weights, random; flash attention on; $threads threads; llama-bench -r $reps, pp$pp and tg$tg at each depth (tokens/s)."
  echo
  header="| KV | depth | test | ggml CPU |"
  rule="| --- | --- | --- | --- |"
  for launch in "${launch_list[@]}"; do
    header+=" flashcpu ($launch) | ratio |"
    rule+=" --- | --- |"
  done
  echo "$header"
  echo "$rule"
} >"$summary"
share_lines=()
for kv in "${kv_list[@]}"; do
  for depth in "${context_list[@]}"; do
    bench ggml "$kv" "$depth"
    for launch in "${launch_list[@]}"; do
      bench "flashcpu-$launch" "$kv" "$depth" GGML_BACKEND_PATH="$module" \
        FLASHCPU_GGML_LAUNCH="$launch"
    done
    for test in pp tg; do
      base=$(rate "$out/bench-ggml-$kv-$depth.csv" $test)
      line="| $kv | $depth | $test | $base |"
      for launch in "${launch_list[@]}"; do
        with=$(rate "$out/bench-flashcpu-$launch-$kv-$depth.csv" $test)
        ratio=$(awk -v a="$with" -v b="$base" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        line+=" $with | ${ratio}x |"
      done
      echo "$line" >>"$summary"
    done
    # The attention share: flashcpu's time per layer call, from a profiled
    # run (first launch mode), against the step times measured above.
    launch=${launch_list[0]}
    profile="$out/profile-$kv-$depth.log"
    GGML_BACKEND_PATH="$module" FLASHCPU_GGML_LAUNCH="$launch" FLASHCPU_GGML_PROFILE=1 \
      "$bin/llama-bench" -m "$model" -fa 1 -ctk "$kv" -ctv "$kv" -t "$threads" \
      -p "$pp" -n "$tg" -d "$depth" -r 1 -o csv >/dev/null 2>"$profile"
    decode_us=$(profile_us "$profile" 1 $((depth + tg)))
    prefill_us=$(profile_us "$profile" "$pp" $((depth + pp)))
    for test in tg pp; do
      us=$decode_us tokens=1
      [ $test = pp ] && us=$prefill_us tokens=$pp
      base=$(rate "$out/bench-ggml-$kv-$depth.csv" $test)
      with=$(rate "$out/bench-flashcpu-$launch-$kv-$depth.csv" $test)
      share_lines+=("$(awk -v us="${us:-0}" -v layers="$layers" -v n="$tokens" -v a="$with" -v b="$base" \
        -v kv="$kv" -v d="$depth" -v t="$test" 'BEGIN {
          if (us == 0 || a == 0 || b == 0) { printf "| %s | %s | %s | - | - | - |", kv, d, t; exit }
          step_with = n / a * 1e3; step_base = n / b * 1e3; fa = layers * us / 1e3
          printf "| %s | %s | %s | %.3f ms | %.0f%% | %.0f%% |", kv, d, t, fa,
            100 * fa / step_with, 100 * (step_base - step_with + fa) / step_base }')")
    done
  done
done
{
  echo
  echo "Attention share of a step (tg: one token; pp: $pp tokens): flashcpu's time in the step's $layers attention calls (profiled, launch ${launch_list[0]}), its share of the step with the backend, and the share ggml's own attention would then have without it, (step without - step with + flashcpu's time) / step without, an estimate that assumes the rest of the step is unchanged."
  echo
  echo "| KV | depth | test | flashcpu attention | share with | share without (est.) |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${share_lines[@]}"
} >>"$summary"

# Greedy tokens, with and without the backend.
{
  echo
  echo "Greedy tokens ($greedy_gen after a $greedy_prompt-token random prompt), with and without the backend:"
  echo
} >>"$summary"
for kv in f32 f16; do
  for mode in ggml flashcpu; do
    env_args=()
    [ $mode = flashcpu ] && env_args=(GGML_BACKEND_PATH="$module")
    env "${env_args[@]}" "$bin/llama_greedy_tokens" -m "$model" --kv $kv \
      --prompt "$greedy_prompt" --gen "$greedy_gen" --threads "$threads" \
      >"$out/greedy-$mode-$kv.txt" 2>"$out/greedy-$mode-$kv.log"
  done
  read -r -a a <<<"$(sed -n 's/^tokens: //p' "$out/greedy-ggml-$kv.txt")"
  read -r -a b <<<"$(sed -n 's/^tokens: //p' "$out/greedy-flashcpu-$kv.txt")"
  first=-1
  for ((i = 0; i < ${#a[@]} && i < ${#b[@]}; i++)); do
    [ "${a[$i]}" = "${b[$i]}" ] || { first=$i; break; }
  done
  if [ ${#a[@]} -ne "$greedy_gen" ] || [ ${#b[@]} -ne "$greedy_gen" ]; then
    echo "- $kv KV: a run did not finish (see greedy-*-$kv.log)" >>"$summary"
  elif [ $first -lt 0 ]; then
    echo "- $kv KV: all $greedy_gen tokens agree" >>"$summary"
  else
    echo "- $kv KV: they agree up to token $first, then part (${a[$first]} without, ${b[$first]} with)" >>"$summary"
  fi
done
echo
cat "$summary"
