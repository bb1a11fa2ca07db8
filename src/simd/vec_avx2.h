/* The lane-generic vector vocabulary (fcv_*) on AVX2 + FMA: 8 f32 lanes.
 * See vec_avx512.h. */
#ifndef FLASHCPU_SIMD_VEC_AVX2_H
#define FLASHCPU_SIMD_VEC_AVX2_H

#include "simd/simd_avx2.h"

#define FCV_LANES 8
typedef __m256 fcv;

static inline fcv fcv_zero(void) { return _mm256_setzero_ps(); }
static inline fcv fcv_set1(float x) { return _mm256_set1_ps(x); }
static inline fcv fcv_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void fcv_store(float *p, fcv v) { _mm256_storeu_ps(p, v); }
static inline fcv fcv_fma(fcv a, fcv b, fcv c) {
  return _mm256_fmadd_ps(a, b, c);
}
static inline fcv fcv_mul(fcv a, fcv b) { return _mm256_mul_ps(a, b); }
static inline fcv fcv_add(fcv a, fcv b) { return _mm256_add_ps(a, b); }
static inline fcv fcv_sub(fcv a, fcv b) { return _mm256_sub_ps(a, b); }
static inline fcv fcv_exp2(fcv x) { return fc256_exp2(x); }
static inline fcv fcv_saturate(fcv x) { return fc256_saturate(x); }

/* max that keeps NaN from either side (MAXPS alone returns its second
 * operand when either is NaN). */
static inline fcv fcv_max_nan(fcv a, fcv b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a,
                          _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

static inline fcv fcv_replace_eq(fcv v, float match, float replacement) {
  fcv eq = _mm256_cmp_ps(v, _mm256_set1_ps(match), _CMP_EQ_OQ);
  return _mm256_blendv_ps(v, _mm256_set1_ps(replacement), eq);
}

static inline fcv fcv_hide_outside(fcv v, fcv key, fcv begin, fcv end) {
  fcv outside = _mm256_or_ps(_mm256_cmp_ps(key, begin, _CMP_LT_OQ),
                             _mm256_cmp_ps(key, end, _CMP_GE_OQ));
  return _mm256_blendv_ps(v, _mm256_set1_ps(-INFINITY), outside);
}

static inline fcv fcv_keep_where_hidden(fcv score, fcv old, fcv updated) {
  fcv hidden = _mm256_cmp_ps(score, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm256_blendv_ps(updated, old, hidden);
}

static inline fcv fcv_gather(const float *base, const int32_t *offsets) {
  return _mm256_i32gather_ps(base, _mm256_loadu_si256((const __m256i *)offsets),
                             4);
}

#endif
