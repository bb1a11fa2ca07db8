/* AVX-512 vocabulary for kernels: loads of f32/f16/bf16 as f32 lanes and a
 * vector exp2. Static inline and included only from AVX-512 translation
 * units, so no baseline code can ever link an AVX-512 copy. */
#ifndef FLASHCPU_SIMD_SIMD_AVX512_H
#define FLASHCPU_SIMD_SIMD_AVX512_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "simd/exp2_poly.h"

#include "flashcpu/flashcpu.h"

static inline __mmask16 fc512_tail_mask(int64_t remaining) {
  return remaining >= 16 ? (__mmask16)0xffff
                         : (__mmask16)((1u << remaining) - 1u);
}

/* Up to 16 elements of a row of dtype at element index i, widened to f32
 * (exactly), lanes past the mask zero. */
static inline __m512 fc512_load(const void *row, flashcpu_dtype dtype,
                                int64_t i, __mmask16 mask) {
  if (dtype == FLASHCPU_DTYPE_F32)
    return _mm512_maskz_loadu_ps(mask, (const float *)row + i);
  __m256i raw = _mm256_maskz_loadu_epi16(mask, (const uint16_t *)row + i);
  if (dtype == FLASHCPU_DTYPE_F16) return _mm512_cvtph_ps(raw);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

/* Lanes clamped to [-FLT_MAX, FLT_MAX]; NaN stays NaN (MAXPS and MINPS
 * return their second operand, x, when either is NaN). */
static inline __m512 fc512_saturate(__m512 x) {
  return _mm512_min_ps(_mm512_set1_ps(FLT_MAX),
                       _mm512_max_ps(_mm512_set1_ps(-FLT_MAX), x));
}

/* 2^x for every lane, to about 2 ulp: x = n + f with n = round(x) and
 * f in [-0.5, 0.5], 2^f by a degree-6 polynomial, 2^n by scalef. The clamp
 * at -150 gives exactly 0 below it (-inf included: 2^-150 rounds to 0) and
 * keeps NaN, which MAXPS returns as its second operand, x: no blends. */
static inline __m512 fc512_exp2(__m512 x) {
  const __m512 clamped = _mm512_max_ps(_mm512_set1_ps(-150.0f), x);
  const __m512 n = _mm512_roundscale_ps(clamped, _MM_FROUND_TO_NEAREST_INT |
                                                     _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(clamped, n);
  __m512 poly = _mm512_set1_ps(FC_EXP2_C6);
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_C5));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_C4));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_C3));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_C2));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_C1));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_C0));
  return _mm512_scalef_ps(poly, n);
}

/* 2^x for weights rounded to bf16 next (FC_EXP2_BF16_*, 1.8e-7): eight
 * instructions instead of fc512_exp2's ten. `finite` (a constant where it
 * is inlined) says no lane is -inf: then the clamp can go, since for any
 * finite x below -150 the result is 0 either way; NaN stays NaN. */
static inline __attribute__((always_inline)) __m512
fc512_exp2_bf16(__m512 x, const int finite) {
  const __m512 clamped =
      finite ? x : _mm512_max_ps(_mm512_set1_ps(-150.0f), x);
  const __m512 n = _mm512_roundscale_ps(clamped, _MM_FROUND_TO_NEAREST_INT |
                                                     _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(clamped, n);
  __m512 poly = _mm512_set1_ps(FC_EXP2_BF16_C5);
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C4));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C3));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C2));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C1));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(poly, n);
}

#endif
