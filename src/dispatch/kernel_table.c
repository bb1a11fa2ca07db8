#include "dispatch/kernel_table.h"

#include <string.h>

#include "common/problem.h"
#include "kernels/decode/decode_onepass.h"
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

void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa) {
  memset(table, 0, sizeof *table);
  table->isa = isa;
  table->tiled = fc_ref_attention;
  table->tiled_name = "fc_attention_tiled__scalar";
  switch (isa) {
#if defined(__x86_64__)
  case FLASHCPU_ISA_AVX512:
    FILL_CONVERTERS(table, avx512);
    table->tiled = fc_attention_prefill__avx512;
    table->tiled_name = "fc_attention_prefill__avx512";
    table->decode = fc_attention_decode_onepass__avx512;
    table->decode_name = "fc_attention_decode_onepass__avx512";
    break;
  case FLASHCPU_ISA_AVX2:
    FILL_CONVERTERS(table, avx2);
    table->tiled = fc_attention_prefill__avx2;
    table->tiled_name = "fc_attention_prefill__avx2";
    break;
#endif
#if defined(__aarch64__)
  case FLASHCPU_ISA_NEON:
    FILL_CONVERTERS(table, neon);
    table->tiled = fc_attention_prefill__neon;
    table->tiled_name = "fc_attention_prefill__neon";
    break;
#endif
  default: FILL_CONVERTERS(table, scalar); break;
  }
}

fc_attention_fn fc_kernel_table_choose(const fc_kernel_table *table,
                                       const fc_problem *p, int team_size_min,
                                       const char **name) {
  /* One-pass decode holds each thread's share of the group's heads on the
   * stack; a thread of the smallest team carries the largest share. */
  int64_t heads_per_thread = (p->group + team_size_min - 1) / team_size_min;
  if (table->decode && p->q_len == 1 &&
      heads_per_thread <= FC_DECODE_MAX_HEADS_PER_THREAD) {
    *name = table->decode_name;
    return table->decode;
  }
  *name = table->tiled_name;
  return table->tiled;
}
