/* Split-KV decode scores from an I8 or U8 K cache by AVX512-VNNI integer
 * dot products (VPDPWSSD: 32 int16 pairs into 16 int32 sums per
 * instruction), for CPUs that have them. q is rounded once per call to
 * 15-bit integers per row (the split-KV driver's round_q), K's codes are
 * widened to int16 in the load: the dot product of the codes is exact, and
 * score = (sum - zero * sum of q) * q scale * row scale in f32. q's
 * rounding (at most 2^-15 of its largest element) is the only difference
 * from the f32 path (with the values' rounding, splitkv_values_avx512vnni.c,
 * where V is I8 or U8 too), far below K's own 8-bit rounding. A quarter of
 * the f32 path's arithmetic per key: one widening load and 4 dot products
 * per 32 elements against 12 conversions and 8 FMAs. */
#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/decode/splitkv_int_scores_avx512.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
  PAIR = 32,
  CHUNK = FC_SPLITKV_CHUNK,
  KEYS = FC_SPLITKV_KEYS_PER_GROUP,
  BLOCK = FC_SPLITKV_KEY_BLOCK
};

static ALWAYS_INLINE void scores_int16(const fc_splitkv_rows *k,
                                       flashcpu_dtype dtype,
                                       const fc_splitkv_int_q *q, int64_t dim,
                                       int64_t n, fc_prefetch_sweep *shared,
                                       float *out) {
  const bool prefetch = shared != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared);
  /* The rows' and q's pointers in locals, kept in registers instead of
   * reloaded beside every 4 dot products (perf showed it); the loop over
   * head_dim is marked for unrolling (gcc does; clang keeps the loop). */
  const int16_t *q_rows[CHUNK];
  for (int s = 0; s < CHUNK; s++) q_rows[s] = q->codes + s * q->stride;
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
#pragma GCC unroll 8
    for (int64_t d = 0; d < dim; d += PAIR) {
      const int64_t left = dim - d;
      const __mmask32 mask = left >= PAIR ? (__mmask32)0xffffffffu
                                          : (__mmask32)((1u << left) - 1u);
      __m512i codes[KEYS];
      for (int j = 0; j < KEYS; j++) {
        const __m256i raw = _mm256_maskz_loadu_epi8(mask, rows[j] + d);
        codes[j] = dtype == FLASHCPU_DTYPE_U8 ? _mm512_cvtepu8_epi16(raw)
                                              : _mm512_cvtepi8_epi16(raw);
      }
      if (prefetch && d % (2 * PAIR) == 0)
        for (int j = 0; j < KEYS; j++) fc_sweep_next(&sweep);
      for (int s = 0; s < CHUNK; s++) {
        const __m512i qs = _mm512_loadu_si512(q_rows[s] + d);
        for (int j = 0; j < KEYS; j++)
          acc[s * KEYS + j] =
              _mm512_dpwssd_epi32(acc[s * KEYS + j], qs, codes[j]);
      }
    }
    groups[g] = fc512_sum16_by_lane_as(acc, 1); /* exact */
  }
  if (prefetch) *shared = sweep;
  const __m512 zero = _mm512_loadu_ps(k->zero);
  fc512_int_scores_finish(groups, k, q,
                          dtype == FLASHCPU_DTYPE_U8 ? &zero : NULL, out);
}

static void int16_scores(const fc_splitkv_rows *k, flashcpu_dtype dtype,
                         const fc_splitkv_int_q *q, int64_t dim, int64_t n,
                         fc_prefetch_sweep *sweep, float *out) {
#define SCORES_FOR(dt, dim_value)                                              \
  scores_int16(k, dt, q, dim_value, n, sweep, out)
  FC_SPLITKV_BY_INT_DTYPE(dtype, dim, SCORES_FOR);
#undef SCORES_FOR
}

/* The AVX-512 split-KV kernel with these scores and integer values
 * (registry row). */
flashcpu_status fc_decode_splitkv_i16dot__avx512vnni(const fc_kernel_env *env,
                                                     const fc_problem *p,
                                                     fc_kernel_plan *plan) {
  return fc_splitkv_plan_avx512_int(
      env, p, plan, int16_scores, fc_splitkv_values_i16dot__avx512vnni, 16383);
}
