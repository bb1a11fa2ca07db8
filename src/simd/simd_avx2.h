/* AVX2 + FMA vocabulary for kernels: a vector exp2 and f32/f16/bf16 loads
 * widened to f32. Static inline, included only from AVX2 translation units
 * (see simd_avx512.h for why). */
#ifndef FLASHCPU_SIMD_SIMD_AVX2_H
#define FLASHCPU_SIMD_SIMD_AVX2_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "simd/exp2_poly.h"

/* Lanes clamped to [-FLT_MAX, FLT_MAX]; NaN stays NaN (MAXPS and MINPS
 * return their second operand, x, when either is NaN). */
static inline __m256 fc256_saturate(__m256 x) {
  return _mm256_min_ps(_mm256_set1_ps(FLT_MAX),
                       _mm256_max_ps(_mm256_set1_ps(-FLT_MAX), x));
}

/* 2^n for integral n in [-126, 127], built in the exponent field. */
static inline __m256 fc256_pow2_int(__m256 n) {
  __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(bits);
}

/* 2^x for every lane, to about 2 ulp, the same polynomial as fc512_exp2.
 * 2^n is applied as 2^(n/2) * 2^(n - n/2) so that results down in the
 * subnormal range round once, like scalef. The clamp gives exactly 0 from
 * -150 down (-inf included) and keeps NaN: MAXPS and MINPS return their
 * second operand, x, when either is NaN, and NaN survives the rest. */
static inline __m256 fc256_exp2(__m256 x) {
  const __m256 clamped = _mm256_min_ps(
      _mm256_set1_ps(128.0f), _mm256_max_ps(_mm256_set1_ps(-150.0f), x));
  const __m256 n =
      _mm256_round_ps(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(clamped, n);
  __m256 poly = _mm256_set1_ps(FC_EXP2_C6);
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(FC_EXP2_C5));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(FC_EXP2_C4));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(FC_EXP2_C3));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(FC_EXP2_C2));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(FC_EXP2_C1));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(FC_EXP2_C0));
  const __m256 half = _mm256_round_ps(_mm256_mul_ps(n, _mm256_set1_ps(0.5f)),
                                      _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  return _mm256_mul_ps(_mm256_mul_ps(poly, fc256_pow2_int(half)),
                       fc256_pow2_int(_mm256_sub_ps(n, half)));
}

#endif
