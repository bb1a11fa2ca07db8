/* ISA names, support and ranking (the cap FLASHCPU_ISA and max_isa set). */
#include "dispatch/isa.h"

#include <string.h>

const char *flashcpu_isa_name(flashcpu_isa isa) {
  switch (isa) {
  case FLASHCPU_ISA_AUTO:
    return "auto";
  case FLASHCPU_ISA_SCALAR:
    return "scalar";
  case FLASHCPU_ISA_AVX2:
    return "avx2";
  case FLASHCPU_ISA_AVX512:
    return "avx512";
  case FLASHCPU_ISA_NEON:
    return "neon";
  }
  return "unknown";
}

int flashcpu_isa_supported(flashcpu_isa isa) {
  return fc_isa_supported(fc_cpu_features_get(), isa);
}

int fc_isa_supported(const fc_cpu_features *f, flashcpu_isa isa) {
  switch (isa) {
  case FLASHCPU_ISA_AUTO:
  case FLASHCPU_ISA_SCALAR:
    return 1;
#if defined(__x86_64__)
  case FLASHCPU_ISA_AVX2:
    return f->avx2 && f->fma && f->f16c;
  case FLASHCPU_ISA_AVX512:
    return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw &&
           f->avx512vl && f->avx512dq;
#endif
#if defined(__aarch64__)
  case FLASHCPU_ISA_NEON:
    return f->neon;
#endif
  default:
    return 0;
  }
}

/* From the best down; a cap is an upper bound in this order. */
static const flashcpu_isa ranked[] = {FLASHCPU_ISA_AVX512, FLASHCPU_ISA_AVX2,
                                      FLASHCPU_ISA_NEON, FLASHCPU_ISA_SCALAR};
enum { RANKED_COUNT = sizeof ranked / sizeof ranked[0] };

static int rank_of(flashcpu_isa isa) {
  for (int i = 0; i < RANKED_COUNT; i++)
    if (ranked[i] == isa) return i;
  return RANKED_COUNT;
}

int fc_isa_within(flashcpu_isa isa, flashcpu_isa cap) {
  return cap == FLASHCPU_ISA_AUTO || rank_of(isa) >= rank_of(cap);
}

flashcpu_isa fc_best_isa(const fc_cpu_features *features, flashcpu_isa cap) {
  for (int i = 0; i < RANKED_COUNT; i++)
    if (fc_isa_within(ranked[i], cap) && fc_isa_supported(features, ranked[i]))
      return ranked[i];
  return FLASHCPU_ISA_SCALAR;
}

int fc_isa_parse(const char *text) {
  if (!text || !*text) return FLASHCPU_ISA_AUTO;
  for (int isa = FLASHCPU_ISA_AUTO; isa <= FLASHCPU_ISA_NEON; isa++)
    if (strcmp(text, flashcpu_isa_name((flashcpu_isa)isa)) == 0) return isa;
  return -1;
}
