/* Exposes the AVX-512 output store and the scalar one it must match to the
 * C++ test. Compiled with the AVX-512 flags; the test calls the vector one
 * only after flashcpu_isa_supported(AVX512). */
#include "common/dtype_convert.h"
#include "simd/simd_avx512.h"
#include "simd/store_avx512.h"

void fc_test_store_avx512(const float *input, int count, float factor,
                          flashcpu_dtype dtype, void *output) {
  for (int i = 0; i < count; i += 16) {
    const __mmask16 mask = fc512_tail_mask(count - i);
    const __m512 x = _mm512_maskz_loadu_ps(mask, input + i);
    fc512_store(_mm512_mul_ps(x, _mm512_set1_ps(factor)), dtype, output, i,
                mask);
  }
}

void fc_test_store_scalar(const float *input, int count, float factor,
                          flashcpu_dtype dtype, void *output) {
  fc_store_row(input, factor, count, dtype, output);
}
