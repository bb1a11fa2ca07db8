/* Quantized K/V rows to f32 in portable C (the baseline build). */
#include "kernels/convert/convert.h"

void fc_dequant_row__scalar(flashcpu_dtype dtype, const char *row,
                            int64_t count, const fc_row_scales *scales,
                            float *destination) {
  fc_dequant_row_portable(dtype, row, count, scales, destination);
}
