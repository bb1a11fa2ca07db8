/* Row converters for aarch64 Advanced SIMD: 4 lanes; the tail goes through
 * the scalar code. */
#include <arm_neon.h>

#include "common/dtype_convert.h"
#include "kernels/convert/convert.h"

void fc_f32_row_to_f32__neon(const void *source, int64_t count, float factor,
                             float *destination) {
  const float *from = source;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4)
    vst1q_f32(destination + i, vmulq_n_f32(vld1q_f32(from + i), factor));
  fc_load_row_f32(from + i, FLASHCPU_DTYPE_F32, count - i, factor,
                  destination + i);
}

void fc_f16_row_to_f32__neon(const void *source, int64_t count, float factor,
                             float *destination) {
  const uint16_t *from = source;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    float16x4_t half = vreinterpret_f16_u16(vld1_u16(from + i));
    vst1q_f32(destination + i, vmulq_n_f32(vcvt_f32_f16(half), factor));
  }
  fc_load_row_f32(from + i, FLASHCPU_DTYPE_F16, count - i, factor,
                  destination + i);
}

void fc_bf16_row_to_f32__neon(const void *source, int64_t count, float factor,
                              float *destination) {
  const uint16_t *from = source;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    uint32x4_t wide = vshll_n_u16(vld1_u16(from + i), 16);
    vst1q_f32(destination + i,
              vmulq_n_f32(vreinterpretq_f32_u32(wide), factor));
  }
  fc_load_row_f32(from + i, FLASHCPU_DTYPE_BF16, count - i, factor,
                  destination + i);
}
