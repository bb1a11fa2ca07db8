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
#   3. the attention share of a step: the backend's profile
#      (FLASHCPU_GGML_PROFILE=1, one clock read per call) of the first
#      launch mode's run, its time per call times the layers, over the
#      step's time;
#   4. greedy tokens (llama_greedy_tokens) on f32 and f16 KV caches: ggml
#      without flash attention as the reference, ggml's flash attention,
#      and flashcpu's; where they part, how close the step was to a tie
#      there, and how far their logits are after the prompt;
#   5. optionally (--backend-ops) ggml's test-backend-ops on FLASH_ATTN_EXT
#      through the backend.
#
#   bench/peers/llama_bench_compare.sh PACKAGE_DIR OUT_DIR [--threads N]
#     [--contexts 4096,16384,32768] [--kv f16,q8_0] [--layers 2] [--reps 3]
#     [--launch host,pool] [--pp 512] [--tg 32] [--greedy-prompt 4096]
#     [--greedy-gen 64] [--weights q8_0|f16] [--greedy-weights f16|q8_0]
#     [--backend-ops] [--no-greedy] [--model-dir DIR] [--rounds 1]
#
# --rounds N runs the configurations of each KV type and depth in turn N
# times and takes the median of each figure (on a host other processes
# share, so that a burst of theirs lands on one round, not on one
# configuration). OUT_DIR gets summary.md (the tables), the llama-bench CSV files, the
# logs and system.txt (CPU, date, builds). The models are written once to
# --model-dir (default OUT_DIR; 0.75 GB with 2 layers of q8_0 weights, 1.4
# GB of f16) and reused by later runs. The greedy runs use f16 weights by
# default: with q8_0 weights llama.cpp rounds every matmul's activations to
# 8 bits, which turns the last bits of any attention result into logit
# differences 25 times larger, and greedy steps whose top two logits are
# that close then part whatever computed the attention.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
package=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
threads=$(nproc) contexts=4096,16384,32768 kvs=f16,q8_0 layers=2 reps=3
launches=host,pool pp=512 tg=32 greedy_prompt=4096 greedy_gen=64
weights=q8_0 greedy_weights=f16 backend_ops=0 greedy=1 model_dir= rounds=1
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
  --greedy-weights) greedy_weights=$2 ;;
  --model-dir) model_dir=$2 ;;
  --rounds) rounds=$2 ;;
  --backend-ops) backend_ops=1; shift; continue ;;
  --no-greedy) greedy=0; shift; continue ;;
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
  echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) (other processes share the cores when it is above 0)"
  echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  cat "$package/BUILD_INFO"
} >"$out/system.txt"
cat "$out/system.txt"

mkdir -p "${model_dir:=$out}"
# model_of WEIGHTS: the random model of those weights, written if missing.
model_of() {
  local path="$model_dir/random-llama3-8b-${layers}layers-$1.gguf"
  [ -f "$path" ] || "$bin/make_random_llama" --vocab "$package/ggml-vocab-llama-spm.gguf" \
    --out "$path" --layers "$layers" --type "$1" >&2
  echo "$path"
}
model=$(model_of "$weights")

if [ "$backend_ops" -eq 1 ]; then
  echo "== test-backend-ops -o FLASH_ATTN_EXT -b FLASHCPU"
  GGML_BACKEND_PATH="$module" "$bin/test-backend-ops" -o FLASH_ATTN_EXT -b FLASHCPU \
    >"$out/backend_ops.log" 2>&1 || true
  sed 's/\x1b\[[0-9;]*m//g' "$out/backend_ops.log" | grep -E '^  FLASH_ATTN_EXT\(' >"$out/backend_ops.cases" || true
  echo "cases $(grep -c . "$out/backend_ops.cases"), passed $(grep -c ': OK$' "$out/backend_ops.cases"), failed $(grep -c 'FAIL$' "$out/backend_ops.cases"), declined $(grep -c 'not supported' "$out/backend_ops.cases")" |
    tee "$out/backend_ops.summary"
fi

# bench NAME KV DEPTH ROUND [ENV...]: one llama-bench run, its CSV in
# OUT_DIR.
bench() {
  local name=$1 kv=$2 depth=$3 round=$4
  shift 4
  echo "== $name kv=$kv depth=$depth round $round"
  env "$@" "$bin/llama-bench" -m "$model" -fa 1 -ctk "$kv" -ctv "$kv" \
    -t "$threads" -p "$pp" -n "$tg" -d "$depth" -r "$reps" -o csv \
    >"$out/bench-$name-$kv-$depth-r$round.csv" 2>"$out/bench-$name-$kv-$depth-r$round.log"
}

# tokens/s of the pp (n_gen 0) or tg (n_prompt 0) row of a CSV (commas
# inside quoted fields, such as cpu_info's, turned into ';' first).
rate() {
  sed -E ':a; s/^(([^"]*"[^"]*")*[^"]*"[^",]*),/\1;/; ta; s/"//g' "$1" |
    awk -F, -v want="$2" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      (want == "pp" && $col["n_gen"] == 0) || (want == "tg" && $col["n_prompt"] == 0) {
        printf "%.2f", $col["avg_ts"] }'
}

# median NAME KV DEPTH TEST: the median over the rounds of rate.
median() {
  local r values=()
  for ((r = 1; r <= rounds; r++)); do
    values+=("$(rate "$out/bench-$1-$2-$3-r$r.csv" "$4")")
  done
  printf '%s\n' "${values[@]}" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0 || v[1] == "") print 0;
      else if (NR % 2) printf "%.2f", v[(NR + 1) / 2];
      else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Mean microseconds per flashcpu call of `rows` rows over up to `keys`
# keys (rounded up to 256 as the profile buckets them).
profile_us() {
  local keys=$(( ($3 + 255) / 256 * 256 ))
  sed -n "s/^flashcpu ggml profile: rows $2 keys<=$keys calls [0-9]* mean_us \([0-9.]*\).*/\1/p" "$1" |
    head -n 1
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
  echo "Model: $layers layers shaped like Llama-3-8B's, $weights weights, random; flash attention on; $threads threads; llama-bench -r $reps, pp$pp and tg$tg at each depth (tokens/s; the median of $rounds round(s) taken in turn)."
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
    for ((round = 1; round <= rounds; round++)); do
      bench ggml "$kv" "$depth" $round
      for launch in "${launch_list[@]}"; do
        bench "flashcpu-$launch" "$kv" "$depth" $round GGML_BACKEND_PATH="$module" \
          FLASHCPU_GGML_LAUNCH="$launch" FLASHCPU_GGML_PROFILE=1
      done
    done
    for test in pp tg; do
      base=$(median ggml "$kv" "$depth" $test)
      line="| $kv | $depth | $test | $base |"
      for launch in "${launch_list[@]}"; do
        with=$(median "flashcpu-$launch" "$kv" "$depth" $test)
        ratio=$(awk -v a="$with" -v b="$base" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        line+=" $with | ${ratio}x |"
      done
      echo "$line" >>"$summary"
    done
    # The attention share: flashcpu's time per layer call, from the first
    # launch mode's profile, against the step times measured above.
    launch=${launch_list[0]}
    profile="$out/bench-flashcpu-$launch-$kv-$depth-r1.log"
    decode_us=$(profile_us "$profile" 1 $((depth + tg)))
    prefill_us=$(profile_us "$profile" "$pp" $((depth + pp)))
    for test in tg pp; do
      us=$decode_us tokens=1
      [ $test = pp ] && us=$prefill_us tokens=$pp
      base=$(median ggml "$kv" "$depth" $test)
      with=$(median "flashcpu-$launch" "$kv" "$depth" $test)
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
  echo "Attention share of a step (tg: one token; pp: $pp tokens): flashcpu's time in the step's $layers attention calls (its profile, launch ${launch_list[0]}), its share of the step with the backend, and the share ggml's own attention would then have without it, (step without - step with + flashcpu's time) / step without, an estimate that assumes the rest of the step is unchanged."
  echo
  echo "| KV | depth | test | flashcpu attention | share with | share without (est.) |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${share_lines[@]}"
} >>"$summary"

# Greedy tokens: ggml without flash attention (f32 scores and softmax) as
# the reference, ggml's flash attention, and flashcpu's through the backend.
# parting A B: the first generated token where two runs differ, or -1.
parting() {
  local -a a b
  read -r -a a <<<"$(sed -n 's/^tokens: //p' "$1")"
  read -r -a b <<<"$(sed -n 's/^tokens: //p' "$2")"
  [ ${#a[@]} -eq "$greedy_gen" ] && [ ${#b[@]} -eq "$greedy_gen" ] || { echo "unfinished"; return; }
  for ((i = 0; i < greedy_gen; i++)); do
    [ "${a[$i]}" = "${b[$i]}" ] || { echo "$i"; return; }
  done
  echo -1
}
# agreement A B: "all N tokens agree" or "agree up to token i (the
# reference's top logit leads the next by x there)".
agreement() {
  local at margin
  at=$(parting "$1" "$2")
  case $at in
  -1) echo "all $greedy_gen tokens agree" ;;
  unfinished) echo "a run did not finish (see its .log)" ;;
  *)
    margin=$(sed -n 's/^margins: //p' "$3" | awk -v i="$at" '{ print $(i + 1) }')
    echo "agree up to token $at (where the reference's top logit leads the next by $margin)" ;;
  esac
}
[ "$greedy" -eq 0 ] || {
  echo
  echo "Greedy tokens ($greedy_gen after a $greedy_prompt-token random prompt, the model with $greedy_weights weights). Reference: ggml without flash attention (f32 scores and softmax); ggml FA: ggml's flash attention; flashcpu: flash attention through the backend. Logits after the prompt, before any token differs, as max / rms of the differences:"
  echo
} >>"$summary"
greedy_kvs=()
[ "$greedy" -eq 0 ] || greedy_kvs=(f32 f16)
[ ${#greedy_kvs[@]} -eq 0 ] || greedy_model=$(model_of "$greedy_weights")
for kv in "${greedy_kvs[@]}"; do
  g="$out/greedy-$kv"
  common=(-m "$greedy_model" --kv $kv --prompt "$greedy_prompt" --gen "$greedy_gen" --threads "$threads")
  "$bin/llama_greedy_tokens" "${common[@]}" --fa off --logits "$g-ref.logits" \
    >"$g-ref.txt" 2>"$g-ref.log" || true
  "$bin/llama_greedy_tokens" "${common[@]}" --logits "$g-ggml.logits" \
    --compare "$g-ref.logits" >"$g-ggml.txt" 2>"$g-ggml.log" || true
  GGML_BACKEND_PATH="$module" "$bin/llama_greedy_tokens" "${common[@]}" \
    --compare "$g-ref.logits" --compare "$g-ggml.logits" \
    >"$g-flashcpu.txt" 2>"$g-flashcpu.log" || true
  logit_gap() { sed -n "s|^logits vs $2: max \([^ ]*\) rms \([^ ]*\) .*|\1 / \2|p" "$1"; }
  {
    echo "- $kv KV: flashcpu and ggml FA $(agreement "$g-flashcpu.txt" "$g-ggml.txt" "$g-ref.log");" \
      "flashcpu and the reference $(agreement "$g-flashcpu.txt" "$g-ref.txt" "$g-ref.log");" \
      "ggml FA and the reference $(agreement "$g-ggml.txt" "$g-ref.txt" "$g-ref.log")." \
      "Logits: ggml FA vs reference $(logit_gap "$g-ggml.txt" "$g-ref.logits"), flashcpu vs reference" \
      "$(logit_gap "$g-flashcpu.txt" "$g-ref.logits"), flashcpu vs ggml FA $(logit_gap "$g-flashcpu.txt" "$g-ggml.logits")" \
      "(logits of rms $(sed -n 's/.*(rms of these logits \([^)]*\)).*/\1/p' "$g-ggml.txt" | head -n 1))."
  } >>"$summary"
done
echo "
Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$summary"
echo
cat "$summary"
