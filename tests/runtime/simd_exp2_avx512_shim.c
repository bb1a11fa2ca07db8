/* Exposes the AVX-512 exp2 to the C++ test. Compiled with the AVX-512
 * flags; the test calls it only after flashcpu_isa_supported(AVX512). */
#include "simd/simd_avx512.h"

void fc_test_exp2_avx512(const float *input, float *output, int count) {
  for (int i = 0; i < count; i += 16) {
    __mmask16 mask = fc512_tail_mask(count - i);
    __m512 x = _mm512_maskz_loadu_ps(mask, input + i);
    _mm512_mask_storeu_ps(output + i, mask, fc512_exp2(x));
  }
}

/* The exp2 of weights that are rounded to bf16 next. */
void fc_test_exp2_bf16_avx512(const float *input, float *output, int count) {
  for (int i = 0; i < count; i += 16) {
    __mmask16 mask = fc512_tail_mask(count - i);
    __m512 x = _mm512_maskz_loadu_ps(mask, input + i);
    _mm512_mask_storeu_ps(output + i, mask, fc512_exp2_bf16(x));
  }
}
