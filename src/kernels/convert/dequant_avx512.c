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
  for (int64_t d = 0; d < count; d += 16) {
    const __mmask16 mask = fc512_tail_mask(count - d);
    _mm512_mask_storeu_ps(
        destination + d, mask,
        fc512_dequant_lanes(dtype, row, d, mask, scale_value, zero_value));
  }
}
