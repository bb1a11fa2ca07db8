/* Quantized K/V rows to f32 for AVX2 + F16C: 8 codes at a time, widened in
 * registers, then (code - zero) * scale: the portable bits. The tail, and
 * scales that vary along the row (per channel), take the portable loop. */
#include <immintrin.h>

#include "kernels/convert/convert.h"

/* 8 codes from element d as f32 (Q8_0: times its block's d). */
static inline __m256 codes_f32(flashcpu_dtype dtype, const char *row,
                               int64_t d) {
  if (dtype == FLASHCPU_DTYPE_Q8_0) {
    const char *block = row + d / FC_Q8_0_BLOCK * FC_Q8_0_BYTES;
    const __m128i raw =
        _mm_loadl_epi64((const __m128i *)(block + 2 + d % FC_Q8_0_BLOCK));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)),
                         _mm256_set1_ps(fc_q8_0_scale(block)));
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
        _mm256_and_ps(value, _mm256_castsi256_ps(
                                 _mm256_set1_epi32((int)0x80000000u))),
        _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    return _mm256_blendv_ps(value, quiet, nan);
  }
  }
}

void fc_dequant_row__avx2(flashcpu_dtype dtype, const char *row,
                          int64_t count, const fc_row_scales *scales,
                          float *destination) {
  float scale_value, zero_value;
  if (!fc_row_scales_uniform(scales, &scale_value, &zero_value)) {
    fc_dequant_row_portable(dtype, row, count, scales, destination);
    return;
  }
  const int has_scale = scales->scales != NULL, has_zero = scales->zeros != NULL;
  const __m256 scale = _mm256_set1_ps(scale_value);
  const __m256 zero = _mm256_set1_ps(zero_value);
  int64_t d = 0;
  for (; d + 8 <= count; d += 8) {
    __m256 value = codes_f32(dtype, row, d);
    if (has_zero) value = _mm256_sub_ps(value, zero);
    if (has_scale) value = _mm256_mul_ps(value, scale);
    _mm256_storeu_ps(destination + d, value);
  }
  if (d < count) /* not Q8_0: its rows are whole blocks */
    fc_dequant_row_portable(dtype, row + d, count - d, scales,
                            destination + d);
}
