/* Row converters for AVX2 + F16C: 8 lanes; the tail goes through the
 * scalar code. Built with -mavx2 -mfma -mf16c; called only after dispatch. */
#include <immintrin.h>

#include "common/dtype_convert.h"
#include "kernels/convert/convert.h"

void fc_f32_row_to_f32__avx2(const void *source, int64_t count, float factor,
                             float *destination) {
  const float *from = source;
  __m256 scale = _mm256_set1_ps(factor);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(destination + i,
                     _mm256_mul_ps(_mm256_loadu_ps(from + i), scale));
  fc_load_row_f32(from + i, FLASHCPU_DTYPE_F32, count - i, factor,
                  destination + i);
}

void fc_f16_row_to_f32__avx2(const void *source, int64_t count, float factor,
                             float *destination) {
  const uint16_t *from = source;
  __m256 scale = _mm256_set1_ps(factor);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i half = _mm_loadu_si128((const __m128i *)(from + i));
    _mm256_storeu_ps(destination + i,
                     _mm256_mul_ps(_mm256_cvtph_ps(half), scale));
  }
  fc_load_row_f32(from + i, FLASHCPU_DTYPE_F16, count - i, factor,
                  destination + i);
}

void fc_bf16_row_to_f32__avx2(const void *source, int64_t count, float factor,
                              float *destination) {
  const uint16_t *from = source;
  __m256 scale = _mm256_set1_ps(factor);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i raw = _mm_loadu_si128((const __m128i *)(from + i));
    __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16);
    _mm256_storeu_ps(destination + i,
                     _mm256_mul_ps(_mm256_castsi256_ps(wide), scale));
  }
  fc_load_row_f32(from + i, FLASHCPU_DTYPE_BF16, count - i, factor,
                  destination + i);
}
