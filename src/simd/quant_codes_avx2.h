/* Quantized K/V codes widened to f32 in AVX2 + F16C registers: what the
 * row dequantizer (dequant_avx2.c) and the split-KV micro-kernels that read
 * quantized rows in place share, so both give the portable bits. */
#ifndef FLASHCPU_SIMD_QUANT_CODES_AVX2_H
#define FLASHCPU_SIMD_QUANT_CODES_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "common/quant.h"
#include "flashcpu/flashcpu.h"
#include "simd/q8_0_scale_f16c.h"

/* 8 codes from element d as f32 (Q8_0: times its block's d). */
static inline __m256 fc256_quant_codes(flashcpu_dtype dtype, const char *row,
                                       int64_t d) {
  if (dtype == FLASHCPU_DTYPE_Q8_0) {
    const char *block = row + d / FC_Q8_0_BLOCK * FC_Q8_0_BYTES;
    const __m128i raw =
        _mm_loadl_epi64((const __m128i *)(block + 2 + d % FC_Q8_0_BLOCK));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)),
                         _mm256_set1_ps(fc_q8_0_scale_f16c(block)));
  }
  const __m128i raw = _mm_loadl_epi64((const __m128i *)(row + d));
  switch (dtype) {
  case FLASHCPU_DTYPE_I8:
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
  case FLASHCPU_DTYPE_U8:
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(raw));
  case FLASHCPU_DTYPE_F8_E5M2:
    return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(raw), 8));
  default: { /* E4M3 as an f16 of value * 2^-8 (exact), times 2^8 */
    const __m128i wide = _mm_cvtepu8_epi16(raw);
    const __m128i magnitude = _mm_and_si128(wide, _mm_set1_epi16(0x7f));
    const __m128i half = _mm_or_si128(
        _mm_slli_epi16(_mm_and_si128(wide, _mm_set1_epi16(0x80)), 8),
        _mm_slli_epi16(magnitude, 7));
    const __m256 value =
        _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_set1_ps(256.0f));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(
        _mm_cmpeq_epi16(magnitude, _mm_set1_epi16(0x7f))));
    const __m256 quiet = _mm256_or_ps(
        _mm256_and_ps(value,
                      _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))),
        _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    return _mm256_blendv_ps(value, quiet, nan);
  }
  }
}

/* 8 elements of a quantized row from d as f32, (code - zero) * scale in
 * one rounding: the row dequantizer's and the split-KV loads' one formula
 * (as fc512_dequant_lanes: zero 0 and scale 1 where a view has none). */
static inline __m256 fc256_dequant_lanes(flashcpu_dtype dtype, const char *row,
                                         int64_t d, float scale, float zero) {
  __m256 value = fc256_quant_codes(dtype, row, d);
  if (dtype == FLASHCPU_DTYPE_U8)
    value = _mm256_sub_ps(value, _mm256_set1_ps(zero));
  if (dtype != FLASHCPU_DTYPE_Q8_0)
    value = _mm256_mul_ps(value, _mm256_set1_ps(scale));
  return value;
}

#endif
