/* Quantized K/V rows to f32 for AVX2 + F16C: 8 codes at a time, widened in
 * registers, then (code - zero) * scale: the portable bits. The tail, and
 * scales that vary along the row (per channel), take the portable loop. */
#include <immintrin.h>

#include "kernels/convert/convert.h"
#include "simd/quant_codes_avx2.h"

void fc_dequant_row__avx2(flashcpu_dtype dtype, const char *row, int64_t count,
                          const fc_row_scales *scales, float *destination) {
  float scale_value, zero_value;
  if (!fc_row_scales_uniform(scales, &scale_value, &zero_value)) {
    fc_dequant_row_portable(dtype, row, count, scales, destination);
    return;
  }
  int64_t d = 0;
  for (; d + 8 <= count; d += 8)
    _mm256_storeu_ps(
        destination + d,
        fc256_dequant_lanes(dtype, row, d, scale_value, zero_value));
  if (d < count) /* not Q8_0: its rows are whole blocks */
    fc_dequant_row_portable(dtype, row + d, count - d, scales, destination + d);
}
