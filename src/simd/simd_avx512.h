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

/* 2^x for every lane: x = n + f with n = round(x) and f in [-0.5, 0.5],
 * 2^f by the polynomial c[0] + f (c[1] + ... + f c[degree]) (Horner), 2^n
 * by scalef. The clamp at -150 gives exactly 0 below it (-inf included:
 * 2^-150 rounds to 0) and keeps NaN, which MAXPS returns as its second
 * operand, x: no blends. */
static inline __attribute__((always_inline)) __m512
fc512_exp2_poly(__m512 x, const float *c, const int degree) {
  const __m512 clamped = _mm512_max_ps(_mm512_set1_ps(-150.0f), x);
  const __m512 n = _mm512_roundscale_ps(clamped, _MM_FROUND_TO_NEAREST_INT |
                                                     _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(clamped, n);
  __m512 poly = _mm512_set1_ps(c[degree]);
  for (int i = degree - 1; i >= 0; i--)
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(c[i]));
  return _mm512_scalef_ps(poly, n);
}

/* 2^x to about 2 ulp (the degree-6 polynomial of exp2_poly.h). */
static inline __m512 fc512_exp2(__m512 x) {
  static const float c[] = {FC_EXP2_C0, FC_EXP2_C1, FC_EXP2_C2, FC_EXP2_C3,
                            FC_EXP2_C4, FC_EXP2_C5, FC_EXP2_C6};
  return fc512_exp2_poly(x, c, 6);
}

/* 2^x for weights rounded to bf16 next (FC_EXP2_BF16_*, 1.5e-7): f = x -
 * floor(x) in [0, 1] by one VREDUCEPS, 2^f by the degree-5 polynomial and
 * 2^floor(x) by VSCALEFPS, which floors its exponent itself: seven
 * instructions (ROUNDSCALE alone costs two FMAs' time on an Intel Xeon).
 * No clamp: REDUCE takes -inf to 0, and SCALEF by -inf gives 0; NaN stays
 * NaN. */
static inline __attribute__((always_inline)) __m512 fc512_exp2_bf16(__m512 x) {
  const __m512 f =
      _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 poly = _mm512_set1_ps(FC_EXP2_BF16_C5);
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C4));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C3));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C2));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(FC_EXP2_BF16_C1));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(poly, x);
}

#endif
