/* The lane-generic vector vocabulary (fcv_*) on AVX-512: 16 f32 lanes.
 * Kernels written once against fcv_* (src/kernels/prefill) include exactly
 * one vec_<isa>.h, from that ISA's translation unit only. */
#ifndef FLASHCPU_SIMD_VEC_AVX512_H
#define FLASHCPU_SIMD_VEC_AVX512_H

#include "simd/simd_avx512.h"

#define FCV_LANES 16
typedef __m512 fcv;

static inline fcv fcv_zero(void) { return _mm512_setzero_ps(); }
static inline fcv fcv_set1(float x) { return _mm512_set1_ps(x); }
static inline fcv fcv_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void fcv_store(float *p, fcv v) { _mm512_storeu_ps(p, v); }
static inline fcv fcv_fma(fcv a, fcv b, fcv c) {
  return _mm512_fmadd_ps(a, b, c);
}
static inline fcv fcv_mul(fcv a, fcv b) { return _mm512_mul_ps(a, b); }
static inline fcv fcv_add(fcv a, fcv b) { return _mm512_add_ps(a, b); }
static inline fcv fcv_sub(fcv a, fcv b) { return _mm512_sub_ps(a, b); }
static inline fcv fcv_exp2(fcv x) { return fc512_exp2(x); }
static inline fcv fcv_saturate(fcv x) { return fc512_saturate(x); }

/* max that keeps NaN from either side (MAXPS alone returns its second
 * operand when either is NaN). */
static inline fcv fcv_max_nan(fcv a, fcv b) {
  __mmask16 a_nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(a_nan, _mm512_max_ps(a, b), a);
}

/* Lanes of v equal to `match` become `replacement`. */
static inline fcv fcv_replace_eq(fcv v, float match, float replacement) {
  __mmask16 eq = _mm512_cmp_ps_mask(v, _mm512_set1_ps(match), _CMP_EQ_OQ);
  return _mm512_mask_blend_ps(eq, v, _mm512_set1_ps(replacement));
}

/* Lanes where key >= end or key < begin become -inf. */
static inline fcv fcv_hide_outside(fcv v, fcv key, fcv begin, fcv end) {
  __mmask16 outside = _mm512_cmp_ps_mask(key, begin, _CMP_LT_OQ) |
                      _mm512_cmp_ps_mask(key, end, _CMP_GE_OQ);
  return _mm512_mask_blend_ps(outside, v, _mm512_set1_ps(-INFINITY));
}

/* Lanes where score is -inf keep `old`, the others take `updated`. */
static inline fcv fcv_keep_where_hidden(fcv score, fcv old, fcv updated) {
  __mmask16 hidden =
      _mm512_cmp_ps_mask(score, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_blend_ps(hidden, updated, old);
}

/* base[offsets[i]] for each lane (element offsets fit in int32). */
static inline fcv fcv_gather(const float *base, const int32_t *offsets) {
  return _mm512_i32gather_ps(_mm512_loadu_si512(offsets), base, 4);
}

#endif
