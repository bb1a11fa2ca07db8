#include "dispatch/kernel_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/problem.h"
#include "kernels/decode/decode_onepass.h"
#include "kernels/decode/decode_splitkv.h"
#include "kernels/prefill/prefill.h"
#include "ref/ref_attention.h"

const char *flashcpu_isa_name(flashcpu_isa isa) {
  switch (isa) {
  case FLASHCPU_ISA_AUTO: return "auto";
  case FLASHCPU_ISA_SCALAR: return "scalar";
  case FLASHCPU_ISA_AVX2: return "avx2";
  case FLASHCPU_ISA_AVX512: return "avx512";
  case FLASHCPU_ISA_NEON: return "neon";
  }
  return "unknown";
}

int flashcpu_isa_supported(flashcpu_isa isa) {
  return fc_isa_supported(fc_cpu_features_get(), isa);
}

int fc_isa_supported(const fc_cpu_features *f, flashcpu_isa isa) {
  switch (isa) {
  case FLASHCPU_ISA_AUTO:
  case FLASHCPU_ISA_SCALAR: return 1;
#if defined(__x86_64__)
  case FLASHCPU_ISA_AVX2: return f->avx2 && f->fma && f->f16c;
  case FLASHCPU_ISA_AVX512:
    return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw &&
           f->avx512vl && f->avx512dq;
#endif
#if defined(__aarch64__)
  case FLASHCPU_ISA_NEON: return f->neon;
#endif
  default: return 0;
  }
}

flashcpu_isa fc_best_isa(const fc_cpu_features *features, flashcpu_isa cap) {
  /* From the best down; the cap is an upper bound in this order. */
  static const flashcpu_isa ranked[] = {FLASHCPU_ISA_AVX512, FLASHCPU_ISA_AVX2,
                                        FLASHCPU_ISA_NEON, FLASHCPU_ISA_SCALAR};
  int capped = cap != FLASHCPU_ISA_AUTO;
  for (size_t i = 0; i < sizeof ranked / sizeof ranked[0]; i++) {
    if (capped && ranked[i] != cap) continue;
    capped = 0; /* everything below the cap is allowed */
    if (fc_isa_supported(features, ranked[i])) return ranked[i];
  }
  return FLASHCPU_ISA_SCALAR;
}

int fc_isa_parse(const char *text) {
  if (!text || !*text) return FLASHCPU_ISA_AUTO;
  for (int isa = FLASHCPU_ISA_AUTO; isa <= FLASHCPU_ISA_NEON; isa++)
    if (strcmp(text, flashcpu_isa_name((flashcpu_isa)isa)) == 0) return isa;
  return -1;
}

#define FILL_CONVERTERS(table, isa)                                            \
  do {                                                                         \
    (table)->row_to_f32[FLASHCPU_DTYPE_F32] = fc_f32_row_to_f32__##isa;        \
    (table)->row_to_f32[FLASHCPU_DTYPE_F16] = fc_f16_row_to_f32__##isa;        \
    (table)->row_to_f32[FLASHCPU_DTYPE_BF16] = fc_bf16_row_to_f32__##isa;      \
    (table)->row_to_f32_names[FLASHCPU_DTYPE_F32] = "fc_f32_row_to_f32__" #isa; \
    (table)->row_to_f32_names[FLASHCPU_DTYPE_F16] = "fc_f16_row_to_f32__" #isa; \
    (table)->row_to_f32_names[FLASHCPU_DTYPE_BF16] =                           \
        "fc_bf16_row_to_f32__" #isa;                                           \
  } while (0)

#if defined(__x86_64__)
/* Split-KV decode's bf16 scores by VDPBF16PS (products of bf16 values are
 * exact in f32), or by widening K to f32 and FMA. FLASHCPU_DECODE_BF16_DOT
 * =1 or =0 decides; unset, the dot products run on AMD CPUs only: one
 * VDPBF16PS took as long as one FMA on the 2-core AMD VM (twice the work
 * per instruction) but 3.2-5 FMAs' time on the 16-core Xeon (Emerald
 * Rapids), where the widening path was as fast or faster (bench/LOG.md;
 * `flashcpu_instruction_rates` measures both). */
static bool decode_bf16_dot_wanted(const fc_cpu_features *cpu) {
  if (!cpu->avx512_bf16) return false;
  const char *env = getenv("FLASHCPU_DECODE_BF16_DOT");
  if (env && strcmp(env, "1") == 0) return true;
  if (env && strcmp(env, "0") == 0) return false;
  return cpu->vendor_amd;
}
#endif

/* Split-KV decode's prefetch target. FLASHCPU_DECODE_PREFETCH=l1 or =l2
 * (either case) decides; unset or any other value, L1 on AMD CPUs only:
 * the 2-core AMD VM ran kv 16K at 1 thread 4-13% faster with L1
 * prefetches (no change at 2 threads, bound by its memory), the 16-core
 * Xeon slower (kv 1K on 16 threads 87-89 us against 64-67 with L2
 * prefetches; bench/LOG.md). */
static bool decode_prefetch_l1_wanted(const fc_cpu_features *cpu) {
  const char *env = getenv("FLASHCPU_DECODE_PREFETCH");
  if (env && strcasecmp(env, "l1") == 0) return true;
  if (env && strcasecmp(env, "l2") == 0) return false;
  return cpu->vendor_amd;
}

void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa) {
  memset(table, 0, sizeof *table);
  table->isa = isa;
  table->tiled = fc_ref_attention;
  table->tiled_name = "fc_attention_tiled__scalar";
  table->decode_thresholds = fc_decode_thresholds_default();
  table->decode_prefetch_l1 = decode_prefetch_l1_wanted(fc_cpu_features_get());
  switch (isa) {
#if defined(__x86_64__)
  case FLASHCPU_ISA_AVX512:
    FILL_CONVERTERS(table, avx512);
    table->tiled = fc_attention_prefill__avx512;
    table->tiled_name = "fc_attention_prefill__avx512";
    /* Opt-in: on the 16-core Xeon (Emerald Rapids) this variant ran slower
     * than widening K to f32 (bench/LOG-early.md). */
    if (fc_cpu_features_get()->avx512_bf16 && getenv("FLASHCPU_PREFILL_BF16_DOT") &&
        strcmp(getenv("FLASHCPU_PREFILL_BF16_DOT"), "1") == 0) {
      table->tiled_bf16_dot = fc_attention_prefill__avx512bf16;
      table->tiled_bf16_dot_name = "fc_attention_prefill__avx512bf16";
    }
    table->decode = fc_attention_decode_onepass__avx512;
    table->decode_name = "fc_attention_decode_onepass__avx512";
    table->decode_splitkv = fc_attention_decode_splitkv__avx512;
    table->decode_splitkv_name = "fc_attention_decode_splitkv__avx512";
    if (decode_bf16_dot_wanted(fc_cpu_features_get())) {
      table->decode_bf16_scores = fc_bf16_splitkv_scores__avx512bf16;
      table->decode_bf16_scores_name = "fc_bf16_splitkv_scores__avx512bf16";
    }
    break;
  case FLASHCPU_ISA_AVX2:
    FILL_CONVERTERS(table, avx2);
    table->tiled = fc_attention_prefill__avx2;
    table->tiled_name = "fc_attention_prefill__avx2";
    table->decode_splitkv = fc_attention_decode_splitkv__avx2;
    table->decode_splitkv_name = "fc_attention_decode_splitkv__avx2";
    break;
#endif
#if defined(__aarch64__)
  case FLASHCPU_ISA_NEON:
    FILL_CONVERTERS(table, neon);
    table->tiled = fc_attention_prefill__neon;
    table->tiled_name = "fc_attention_prefill__neon";
    table->decode_splitkv = fc_attention_decode_splitkv__neon;
    table->decode_splitkv_name = "fc_attention_decode_splitkv__neon";
    break;
#endif
  default: FILL_CONVERTERS(table, scalar); break;
  }
}

/* Defaults measured on the 2-core AVX-512 VM (bench/LOG-early.md; the
 * template's crossover: bench/LOG.md): split-KV
 * beat one-pass at every decode shape tried (kv 256 to 16K, batch 1 and 8,
 * 1 and 2 threads: 3x to 4x), and the tiled kernel from 16 rows on. The
 * same 8 rows hold for the fcv_* template (AVX2, NEON): where it crosses
 * over depends on the cores (AVX2, llama3-8b kv 4K, `flashcpu tune`: up
 * to 3 rows on the 2-core VM, where 8 rows took 6.75 ms against the
 * prefill kernel's 4.20; up to 24 rows on the 16-core Xeon, where 8 took
 * 1.85 against 2.59), and a default cannot depend on the thread count;
 * machines with few cores get theirs from `flashcpu tune`. */
fc_decode_thresholds fc_decode_thresholds_default(void) {
  fc_decode_thresholds thresholds;
  thresholds.onepass_min_tiles = 0;
  thresholds.onepass_max_kv = 0;
  thresholds.splitkv_max_rows = 8;
  return thresholds;
}

int fc_decode_thresholds_set(fc_decode_thresholds *t, const char *name,
                             size_t length, long long value,
                             long long *max) {
  struct {
    const char *name;
    int64_t *value, max;
  } const fields[] = {
      {"onepass_min_tiles", &t->onepass_min_tiles, INT64_MAX},
      {"onepass_max_kv", &t->onepass_max_kv, INT64_MAX},
      {"splitkv_max_rows", &t->splitkv_max_rows, FC_SPLITKV_MAX_ROWS},
  };
  for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
    if (strlen(fields[f].name) != length ||
        strncmp(name, fields[f].name, length) != 0)
      continue;
    if (max) *max = fields[f].max;
    if (value < 0 || value > fields[f].max) return -2;
    *fields[f].value = value;
    return 0;
  }
  return -1;
}

int fc_decode_thresholds_parse(const char *text, fc_decode_thresholds *t) {
  while (text && *text) {
    size_t length = strcspn(text, "=");
    if (text[length] != '=') return -1;
    char *end;
    long long value = strtoll(text + length + 1, &end, 10);
    if (end == text + length + 1 || (*end != ',' && *end != '\0') ||
        (*end == ',' && end[1] == '\0') ||
        fc_decode_thresholds_set(t, text, length, value, NULL) != 0)
      return -1;
    text = *end == ',' ? end + 1 : end;
  }
  return 0;
}

/* Few query rows: one-pass, split-KV or (none fits) NULL, with the reason. */
static fc_attention_fn choose_decode(const fc_kernel_table *table,
                                     const fc_problem *p, int team_size_min,
                                     const char **name, char *reason,
                                     size_t reason_size) {
  const fc_decode_thresholds *t = &table->decode_thresholds;
  const int64_t tiles = p->batch * p->kv_heads;
  /* One-pass decode holds each thread's share of the group's heads on the
   * stack; a thread of the smallest team carries the largest share. */
  const int64_t heads_per_thread =
      (p->group + team_size_min - 1) / team_size_min;
  const int onepass_fits = table->decode && p->q_len == 1 &&
                           heads_per_thread <= FC_DECODE_MAX_HEADS_PER_THREAD;
  const int many_tiles =
      t->onepass_min_tiles > 0 && tiles >= t->onepass_min_tiles;
  const int short_kv = p->kv_capacity <= t->onepass_max_kv;
  if (onepass_fits && (!table->decode_splitkv || many_tiles || short_kv)) {
    snprintf(reason, reason_size,
             "1 row; %s", !table->decode_splitkv ? "no split-KV kernel"
                          : many_tiles ? "batch x kv heads >= onepass_min_tiles"
                                       : "kv <= onepass_max_kv");
    *name = table->decode_name;
    return table->decode;
  }
  if (table->decode_splitkv && p->q_len <= t->splitkv_max_rows &&
      p->q_len <= FC_SPLITKV_MAX_ROWS) {
    const fc_splitkv_plan plan = fc_splitkv_make_plan(p);
    snprintf(reason, reason_size,
             "%lld rows <= splitkv_max_rows %lld; %lld x %lld splits of %lld "
             "keys",
             (long long)p->q_len, (long long)t->splitkv_max_rows,
             (long long)tiles, (long long)plan.splits,
             (long long)plan.split_keys);
    *name = table->decode_splitkv_name;
    return table->decode_splitkv;
  }
  if (onepass_fits) {
    snprintf(reason, reason_size, "1 row; split-KV takes no single rows");
    *name = table->decode_name;
    return table->decode;
  }
  return NULL;
}

fc_attention_fn fc_kernel_table_choose(const fc_kernel_table *table,
                                       const fc_problem *p, int team_size_min,
                                       const char **name, char *reason,
                                       size_t reason_size) {
  fc_attention_fn decode =
      choose_decode(table, p, team_size_min, name, reason, reason_size);
  if (decode) return decode;
  snprintf(reason, reason_size, "%lld rows: no decode kernel takes them",
           (long long)p->q_len);
  if (table->tiled_bf16_dot && p->q.dtype == FLASHCPU_DTYPE_BF16 &&
      p->k.dtype == FLASHCPU_DTYPE_BF16 && p->head_dim % 2 == 0) {
    *name = table->tiled_bf16_dot_name;
    return table->tiled_bf16_dot;
  }
  *name = table->tiled_name;
  return table->tiled;
}
