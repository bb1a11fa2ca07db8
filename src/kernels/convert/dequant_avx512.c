/* Quantized K/V rows to f32 for AVX-512 (BW, VL): 16 codes at a time,
 * widened in registers, then (code - zero) * scale: the portable bits.
 * Scales that vary along the row (per channel) take the portable loop. */
#include <math.h>

#include "kernels/convert/convert.h"
#include "simd/quant_codes_avx512.h"
#include "simd/simd_avx512.h"

void fc_dequant_row__avx512(flashcpu_dtype dtype, const char *row,
                            int64_t count, const fc_row_scales *scales,
                            float *destination) {
  float scale_value, zero_value;
  if (!fc_row_scales_uniform(scales, &scale_value, &zero_value)) {
    fc_dequant_row_portable(dtype, row, count, scales, destination);
    return;
  }
  const int has_scale = scales->scales != NULL, has_zero = scales->zeros != NULL;
  const __m512 scale = _mm512_set1_ps(scale_value);
  const __m512 zero = _mm512_set1_ps(zero_value);
  for (int64_t d = 0; d < count; d += 16) {
    const __mmask16 mask = fc512_tail_mask(count - d);
    __m512 value = fc512_quant_codes(dtype, row, d, mask);
    if (has_zero) value = _mm512_sub_ps(value, zero);
    if (has_scale) value = _mm512_mul_ps(value, scale);
    _mm512_mask_storeu_ps(destination + d, mask, value);
  }
}
