/* f32/f16/bf16 prefill for AVX-512: register blocks of 32 query slots (two
 * vectors); S micro-tile 12 keys x 32 slots and O micro-tile 12 columns x
 * 32 slots, 24 accumulators each out of 32 registers. bf16 Q and K can go
 * to the AVX512-BF16 variant (prefill_avx512bf16.c), on request. */
#include <stdlib.h>
#include <string.h>

#include "dispatch/cpu_features.h"
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 12
#define PF_PV_COLUMNS 12
#define PF_NAME(what) fc_f32_prefill_##what##_12x32__avx512
#define PF_KERNEL fc_f32_prefill_12x32__avx512
#define PF_KERNEL_LINKAGE static

#include "kernels/prefill/prefill_tiled.inc"

/* Off unless FLASHCPU_PREFILL_BF16_DOT=1: on the 16-core Xeon (Emerald
 * Rapids) the VDPBF16PS S tile ran slower than widening K to f32 and using
 * FMA (bench/NOTES.md), so it is kept as an opt-in, tested variant. */
int fc_prefill_bf16_dot_applies(const fc_problem *p) {
  const char *opt_in = getenv("FLASHCPU_PREFILL_BF16_DOT");
  return opt_in && strcmp(opt_in, "1") == 0 &&
         fc_cpu_features_get()->avx512_bf16 &&
         p->q.dtype == FLASHCPU_DTYPE_BF16 &&
         p->k.dtype == FLASHCPU_DTYPE_BF16 && p->head_dim % 2 == 0;
}

flashcpu_status fc_attention_prefill__avx512(flashcpu_context *ctx,
                                             fc_runtime *runtime,
                                             const fc_kernel_table *table,
                                             const fc_problem *p) {
  if (fc_prefill_bf16_dot_applies(p))
    return fc_attention_prefill__avx512bf16(ctx, runtime, table, p);
  return fc_f32_prefill_12x32__avx512(ctx, runtime, table, p);
}
