/* Row converters in portable C (the baseline build). */
#include "common/dtype_convert.h"
#include "kernels/convert/convert.h"

void fc_f32_row_to_f32__scalar(const void *source, int64_t count, float factor,
                               float *destination) {
  fc_load_row_f32(source, FLASHCPU_DTYPE_F32, count, factor, destination);
}

void fc_f16_row_to_f32__scalar(const void *source, int64_t count, float factor,
                               float *destination) {
  fc_load_row_f32(source, FLASHCPU_DTYPE_F16, count, factor, destination);
}

void fc_bf16_row_to_f32__scalar(const void *source, int64_t count, float factor,
                                float *destination) {
  fc_load_row_f32(source, FLASHCPU_DTYPE_BF16, count, factor, destination);
}
