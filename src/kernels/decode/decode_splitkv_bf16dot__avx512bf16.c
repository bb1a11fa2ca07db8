/* Split-KV decode scores from bf16 q and K by AVX512-BF16 dot products
 * (VDPBF16PS: 32 bf16 pairs into 16 f32 sums per instruction), for CPUs
 * that have them. The products of two bf16 values are exact in f32; the
 * sums round as the FMA path's do, in a different order. Half the
 * arithmetic of widening K to f32, and no widening. */
#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_bf16_dot.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { PAIR = 32 };

static ALWAYS_INLINE void scores_bf16(const char *const *k_rows,
                                      const uint16_t *q, int64_t q_stride,
                                      int64_t dim, int64_t n, float factor,
                                      fc_prefetch_sweep *shared_sweep,
                                      float *out) {
  const bool prefetch = shared_sweep != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared_sweep);
  __m512 groups[FC_SPLITKV_KEY_BLOCK / FC_SPLITKV_KEYS_PER_GROUP];
  for (int g = 0; g < FC_SPLITKV_KEY_BLOCK / FC_SPLITKV_KEYS_PER_GROUP; g++) {
    if (g * FC_SPLITKV_KEYS_PER_GROUP >= n) {
      groups[g] = _mm512_setzero_ps();
      continue;
    }
    __m512 acc[FC_SPLITKV_CHUNK * FC_SPLITKV_KEYS_PER_GROUP];
    for (int i = 0; i < FC_SPLITKV_CHUNK * FC_SPLITKV_KEYS_PER_GROUP; i++)
      acc[i] = _mm512_setzero_ps();
    for (int64_t d = 0; d < dim; d += PAIR) {
      const int64_t left = dim - d;
      const __mmask32 mask = left >= PAIR ? (__mmask32)0xffffffffu
                                          : (__mmask32)((1u << left) - 1u);
      __m512bh k[FC_SPLITKV_KEYS_PER_GROUP];
      for (int j = 0; j < FC_SPLITKV_KEYS_PER_GROUP; j++) {
        const char *row = k_rows[g * FC_SPLITKV_KEYS_PER_GROUP + j];
        if (prefetch) fc_sweep_next(&sweep);
        k[j] =
            (__m512bh)_mm512_maskz_loadu_epi16(mask, (const uint16_t *)row + d);
      }
      fc_splitkv_bf16_dot_step(acc, q, q_stride, d, k);
    }
    groups[g] = fc512_sum16_by_lane(acc);
  }
  if (prefetch) *shared_sweep = sweep;
  __m512 scores[FC_SPLITKV_CHUNK];
  fc512_transpose_128x4(groups, scores);
  const __m512 f = _mm512_set1_ps(factor);
  for (int s = 0; s < FC_SPLITKV_CHUNK; s++)
    _mm512_storeu_ps(out + s * FC_SPLITKV_KEY_BLOCK,
                     fc512_saturate(_mm512_mul_ps(scores[s], f)));
}

static void bf16_scores(const fc_splitkv_rows *k, flashcpu_dtype k_dtype,
                        const uint16_t *q, int64_t q_stride, int64_t dim,
                        int64_t n, float factor, fc_prefetch_sweep *sweep,
                        float *out) {
  (void)k_dtype; /* BF16: the row takes no other */
  /* head_dim 64 and 128 get their own unrolled copy. */
  if (dim == 128)
    scores_bf16(k->row, q, q_stride, 128, n, factor, sweep, out);
  else if (dim == 64)
    scores_bf16(k->row, q, q_stride, 64, n, factor, sweep, out);
  else
    scores_bf16(k->row, q, q_stride, dim, n, factor, sweep, out);
}

/* The AVX-512 split-KV kernel with these scores (registry row). */
flashcpu_status fc_decode_splitkv_bf16dot__avx512bf16(const fc_kernel_env *env,
                                                      const fc_problem *p,
                                                      fc_kernel_plan *plan) {
  return fc_splitkv_plan_avx512(env, p, plan, bf16_scores);
}
