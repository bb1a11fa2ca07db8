/* Row converters for AVX-512F: 16 lanes, masked tail. Built with the
 * AVX-512 flags; called only after dispatch. */
#include <immintrin.h>

#include "kernels/convert/convert.h"

static inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? (__mmask16)0xffff
                         : (__mmask16)((1u << remaining) - 1u);
}

void fc_f32_row_to_f32__avx512(const void *source, int64_t count,
                               float factor, float *destination) {
  const float *from = source;
  __m512 scale = _mm512_set1_ps(factor);
  for (int64_t i = 0; i < count; i += 16) {
    __mmask16 mask = tail_mask(count - i);
    __m512 value = _mm512_maskz_loadu_ps(mask, from + i);
    _mm512_mask_storeu_ps(destination + i, mask, _mm512_mul_ps(value, scale));
  }
}

void fc_f16_row_to_f32__avx512(const void *source, int64_t count,
                               float factor, float *destination) {
  const uint16_t *from = source;
  __m512 scale = _mm512_set1_ps(factor);
  for (int64_t i = 0; i < count; i += 16) {
    __mmask16 mask = tail_mask(count - i);
    __m256i half = _mm256_maskz_loadu_epi16(mask, from + i);
    _mm512_mask_storeu_ps(destination + i, mask,
                          _mm512_mul_ps(_mm512_cvtph_ps(half), scale));
  }
}

void fc_bf16_row_to_f32__avx512(const void *source, int64_t count,
                                float factor, float *destination) {
  const uint16_t *from = source;
  __m512 scale = _mm512_set1_ps(factor);
  for (int64_t i = 0; i < count; i += 16) {
    __mmask16 mask = tail_mask(count - i);
    __m256i raw = _mm256_maskz_loadu_epi16(mask, from + i);
    __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16);
    _mm512_mask_storeu_ps(destination + i, mask,
                          _mm512_mul_ps(_mm512_castsi512_ps(wide), scale));
  }
}
