/* Split-KV decode scores from an I8 or U8 K cache by AVX512-VNNI byte dot
 * products (VPDPBUSD: 64 unsigned x signed byte products into 16 int32
 * sums per instruction, twice VPDPWSSD's work for the same issue slot),
 * for CPUs that have them. q is rounded once per call to 8-bit integers
 * per row (the split-KV driver's round_q with a limit of 127: a step of
 * max|q| / 127, about what K's own 8-bit rounding costs each score), and
 * K's codes go in as they lie: U8 ones as the unsigned operand, I8 ones
 * with the sign bit flipped (code + 128), so
 *   score = (sum - (zero + 128 [I8]) * sum of q) * q scale * row scale
 * in f32 (the integer sums are exact). No widening: per key and 64
 * elements one load and 4 dot products for the chunk's 4 slots. */
#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/decode/splitkv_int_scores_avx512.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
  STEP = 64,
  CHUNK = FC_SPLITKV_CHUNK,
  KEYS = FC_SPLITKV_KEYS_PER_GROUP,
  BLOCK = FC_SPLITKV_KEY_BLOCK
};

static ALWAYS_INLINE void scores_bytes(const fc_splitkv_rows *k,
                                       flashcpu_dtype dtype,
                                       const fc_splitkv_int_q *q, int64_t dim,
                                       int64_t n, fc_prefetch_sweep *shared,
                                       float *out) {
  const bool prefetch = shared != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared);
  const int8_t *q_rows[CHUNK];
  for (int s = 0; s < CHUNK; s++)
    q_rows[s] = (const int8_t *)(q->codes + s * q->stride);
  const __m512i sign = _mm512_set1_epi8((char)0x80);
  __m512i groups[BLOCK / KEYS];
  for (int g = 0; g < BLOCK / KEYS; g++) {
    if (g * KEYS >= n) {
      groups[g] = _mm512_setzero_si512();
      continue;
    }
    const char *rows[KEYS];
    for (int j = 0; j < KEYS; j++) rows[j] = k->row[g * KEYS + j];
    __m512i acc[CHUNK * KEYS]; /* acc[slot * KEYS + key] */
    for (int i = 0; i < CHUNK * KEYS; i++) acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int64_t d = 0; d < dim; d += STEP) {
      const int64_t left = dim - d;
      const __mmask64 mask =
          left >= STEP ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
      __m512i codes[KEYS];
      for (int j = 0; j < KEYS; j++) {
        codes[j] = _mm512_maskz_loadu_epi8(mask, rows[j] + d);
        /* Masked-off bytes become 128 here, against q's zeros. */
        if (dtype == FLASHCPU_DTYPE_I8)
          codes[j] = _mm512_xor_si512(codes[j], sign);
      }
      if (prefetch)
        for (int j = 0; j < KEYS; j++) fc_sweep_next(&sweep);
      for (int s = 0; s < CHUNK; s++) {
        const __m512i qs = _mm512_maskz_loadu_epi8(mask, q_rows[s] + d);
        for (int j = 0; j < KEYS; j++)
          acc[s * KEYS + j] =
              _mm512_dpbusd_epi32(acc[s * KEYS + j], codes[j], qs);
      }
    }
    groups[g] = fc512_sum16_by_lane_as(acc, 1); /* exact */
  }
  if (prefetch) *shared = sweep;
  /* The codes' offset from their values: U8's zero point, or the 128 the
   * flipped sign bit added to I8's. */
  const __m512 offset = dtype == FLASHCPU_DTYPE_U8 ? _mm512_loadu_ps(k->zero)
                                                   : _mm512_set1_ps(128.0f);
  fc512_int_scores_finish(groups, k, q, &offset, out);
}

static void byte_scores(const fc_splitkv_rows *k, flashcpu_dtype dtype,
                        const fc_splitkv_int_q *q, int64_t dim, int64_t n,
                        fc_prefetch_sweep *sweep, float *out) {
#define SCORES_FOR(dt, dim_value)                                              \
  scores_bytes(k, dt, q, dim_value, n, sweep, out)
  FC_SPLITKV_BY_INT_DTYPE(dtype, dim, SCORES_FOR);
#undef SCORES_FOR
}

/* The AVX-512 split-KV kernel with these scores and integer values
 * (registry row). */
flashcpu_status fc_decode_splitkv_i8dot__avx512vnni(const fc_kernel_env *env,
                                                    const fc_problem *p,
                                                    fc_kernel_plan *plan) {
  return fc_splitkv_plan_avx512_int(env, p, plan, byte_scores,
                                    fc_splitkv_values_i8dot__avx512vnni, 127);
}
