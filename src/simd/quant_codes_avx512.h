/* Quantized K/V codes widened to f32 in AVX-512 registers: what the row
 * dequantizer (dequant_avx512.c) and the split-KV micro-kernels that read
 * quantized rows in place share, so both give the portable bits. */
#ifndef FLASHCPU_SIMD_QUANT_CODES_AVX512_H
#define FLASHCPU_SIMD_QUANT_CODES_AVX512_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "common/quant.h"
#include "flashcpu/flashcpu.h"
#include "simd/q8_0_scale_f16c.h"

/* 16 E4M3 codes as f32 values times 2^-8 (exact): the f16 with the code's
 * sign in bit 15 and its magnitude in bits 7..13 (one ternary-logic step),
 * NaN codes (magnitude 0x7f) as a quiet NaN of their sign. */
static inline __m512 fc512_e4m3_quarter_byte(__m128i raw) {
  const __m256i wide = _mm256_cvtepu8_epi16(raw);
  const __m256i magnitude =
      _mm256_slli_epi16(_mm256_and_si256(wide, _mm256_set1_epi16(0x7f)), 7);
  const __m256i half = _mm256_ternarylogic_epi32(
      _mm256_slli_epi16(wide, 8), magnitude, _mm256_set1_epi16((short)0x8000),
      0xe4); /* bit 15 from the first operand, the rest from the second */
  const __m512 value = _mm512_cvtph_ps(half);
  const __mmask16 nan =
      _mm256_cmpeq_epi16_mask(magnitude, _mm256_set1_epi16(0x7f << 7));
  const __m512 quiet = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(value), _mm512_set1_epi32((int)0x80000000u),
      _mm512_set1_epi32(0x7fc00000), 0xea)); /* (value & sign) | qnan */
  return _mm512_mask_mov_ps(value, nan, quiet);
}

/* 16 codes from element d as f32 (Q8_0: times its block's d); lanes
 * outside mask are zero and read nothing. */
static inline __m512 fc512_quant_codes(flashcpu_dtype dtype, const char *row,
                                       int64_t d, __mmask16 mask) {
  if (dtype == FLASHCPU_DTYPE_Q8_0) {
    if (!mask) return _mm512_setzero_ps(); /* past the row: no block */
    const char *block = row + d / FC_Q8_0_BLOCK * FC_Q8_0_BYTES;
    const __m128i raw = _mm_maskz_loadu_epi8(
        mask, (const __m128i *)(block + 2 + d % FC_Q8_0_BLOCK));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)),
                         _mm512_set1_ps(fc_q8_0_scale_f16c(block)));
  }
  const __m128i raw = _mm_maskz_loadu_epi8(mask, row + d);
  switch (dtype) {
  case FLASHCPU_DTYPE_I8:
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw));
  case FLASHCPU_DTYPE_U8:
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(raw));
  case FLASHCPU_DTYPE_F8_E5M2: /* an f16's upper byte */
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(raw), 8));
  default: /* E4M3 */
    return _mm512_mul_ps(fc512_e4m3_quarter_byte(raw), _mm512_set1_ps(256.0f));
  }
}

/* 16 elements of a quantized row from d as f32, (code - zero) * scale in
 * one rounding, lanes outside mask zero: the row dequantizer's and the
 * split-KV loads' one formula. zero and scale are 0 and 1 where a view has
 * none (x - 0 and x * 1 are x), and only U8 has zero points, Q8_0 no
 * scales: the operations that would change nothing are left out. */
static inline __m512 fc512_dequant_lanes(flashcpu_dtype dtype, const char *row,
                                         int64_t d, __mmask16 mask, float scale,
                                         float zero) {
  /* E4M3: the 2^8 folded into the scale (exact where it stays finite),
   * one multiplication fewer with the same bits. */
  const float folded = scale * 256.0f;
  if (dtype == FLASHCPU_DTYPE_F8_E4M3 && fabsf(folded) <= FLT_MAX)
    return _mm512_maskz_mul_ps(
        mask, fc512_e4m3_quarter_byte(_mm_maskz_loadu_epi8(mask, row + d)),
        _mm512_set1_ps(folded));
  __m512 value = fc512_quant_codes(dtype, row, d, mask);
  if (dtype == FLASHCPU_DTYPE_U8)
    value = _mm512_maskz_sub_ps(mask, value, _mm512_set1_ps(zero));
  if (dtype != FLASHCPU_DTYPE_Q8_0)
    value = _mm512_maskz_mul_ps(mask, value, _mm512_set1_ps(scale));
  return value;
}

/* fc512_dequant_lanes of E4M3 codes known not to be NaN (no 0x7f or 0xff
 * byte): the sign-extended code shifted to an f16 of value * 2^-8 and its
 * bit 14 cleared, two steps where the NaN-aware widening takes five. */
static inline __m512 fc512_dequant_e4m3_finite(const char *row, int64_t d,
                                               __mmask16 mask, float scale) {
  const float folded = scale * 256.0f;
  if (!(fabsf(folded) <= FLT_MAX))
    return fc512_dequant_lanes(FLASHCPU_DTYPE_F8_E4M3, row, d, mask, scale,
                               0.0f);
  const __m256i half = _mm256_and_si256(
      _mm256_slli_epi16(
          _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(mask, row + d)), 7),
      _mm256_set1_epi16((short)0xbf80));
  return _mm512_maskz_mul_ps(mask, _mm512_cvtph_ps(half),
                             _mm512_set1_ps(folded));
}

/* 32 F8 codes from element d as f32 lanes before their scale (lo: d ..
 * d + 15, hi: d + 16 .. d + 31; lanes outside mask zero, read nothing):
 * E5M2 codes exactly (an f16's upper byte: inf and NaN too), E4M3 codes,
 * none of them a NaN code, times 2^-8 (fc512_dequant_e4m3_finite's f16).
 * Half the instructions of dequantizing 16 at a time: one widening, one
 * shift and at most one and per 32 codes, and no multiplication, which
 * the caller applies to a dot product or a weight instead
 * (fc_f8_unscaled_factor). */
static inline __attribute__((always_inline)) void
fc512_f8_span_unscaled(flashcpu_dtype dtype, const char *row, int64_t d,
                       __mmask32 mask, __m512 *lo, __m512 *hi) {
  const __m256i raw = _mm256_maskz_loadu_epi8(mask, row + d);
  __m512i half;
  if (dtype == FLASHCPU_DTYPE_F8_E5M2)
    half = _mm512_slli_epi16(_mm512_cvtepu8_epi16(raw), 8);
  else
    half = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(raw), 7),
                            _mm512_set1_epi16((short)0xbf80));
  *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(half));
  *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1));
}

/* What fc512_f8_span_unscaled's lanes are multiplied by to be the values
 * over their scale: 2^8 for E4M3, 1 for E5M2. */
static inline float fc_f8_unscaled_factor(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F8_E4M3 ? 256.0f : 1.0f;
}

/* Whether some code among n rows' first dim has every bit of `bits` set
 * (0x7f: an E4M3 NaN; 0x7c: an E5M2 inf or NaN): bits & ~code is zero
 * there, so the unsigned byte minimum over the rows finds it, two vector
 * steps per 64 codes and no mask work where dim is a whole number of
 * 64-byte loads (the decode kernel passes head_dim 128 as a constant). */
static inline __attribute__((always_inline)) int
fc512_rows_have_bits(const char *const *rows, int64_t n, int64_t dim,
                     unsigned char bits) {
  const __m512i want = _mm512_set1_epi8((char)bits);
  __m512i least = _mm512_set1_epi8(-1);
  const int64_t whole = dim / 64 * 64;
  for (int64_t j = 0; j < n; j++) {
    for (int64_t d = 0; d < whole; d += 64)
      least = _mm512_min_epu8(
          least, _mm512_andnot_si512(_mm512_loadu_si512(rows[j] + d), want));
    if (whole < dim) { /* lanes past dim load zero: bits & ~0 != 0 */
      const __mmask64 m = ((__mmask64)1 << (dim - whole)) - 1;
      least = _mm512_min_epu8(
          least, _mm512_andnot_si512(
                     _mm512_maskz_loadu_epi8(m, rows[j] + whole), want));
    }
  }
  return _mm512_cmpeq_epi8_mask(least, _mm512_setzero_si512()) != 0;
}

/* Whether none of n rows' first dim E4M3 codes is a NaN code (0x7f or
 * 0xff). */
static inline __attribute__((always_inline)) int
fc512_e4m3_rows_finite(const char *const *rows, int64_t n, int64_t dim) {
  return !fc512_rows_have_bits(rows, n, dim, 0x7f);
}

#endif
