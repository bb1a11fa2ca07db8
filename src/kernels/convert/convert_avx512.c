/* Row converters for AVX-512F: 16 lanes, masked tail, widening through the
 * shared fc512_load. Built with the AVX-512 flags; called only after
 * dispatch. */
#include "kernels/convert/convert.h"
#include "simd/simd_avx512.h"

static inline void row_to_f32(const void *source, flashcpu_dtype dtype,
                              int64_t count, float factor, float *destination) {
  __m512 scale = _mm512_set1_ps(factor);
  for (int64_t i = 0; i < count; i += 16) {
    __mmask16 mask = fc512_tail_mask(count - i);
    __m512 value = fc512_load(source, dtype, i, mask);
    _mm512_mask_storeu_ps(destination + i, mask, _mm512_mul_ps(value, scale));
  }
}

void fc_f32_row_to_f32__avx512(const void *source, int64_t count, float factor,
                               float *destination) {
  row_to_f32(source, FLASHCPU_DTYPE_F32, count, factor, destination);
}

void fc_f16_row_to_f32__avx512(const void *source, int64_t count, float factor,
                               float *destination) {
  row_to_f32(source, FLASHCPU_DTYPE_F16, count, factor, destination);
}

void fc_bf16_row_to_f32__avx512(const void *source, int64_t count, float factor,
                                float *destination) {
  row_to_f32(source, FLASHCPU_DTYPE_BF16, count, factor, destination);
}
