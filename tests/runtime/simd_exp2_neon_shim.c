/* Exposes the NEON exp2 to the C++ test (aarch64 only, where NEON is part
 * of the baseline); the test calls it only after
 * flashcpu_isa_supported(NEON). */
#include <string.h>

#include "simd/simd_neon.h"

void fc_test_exp2_neon(const float *input, float *output, int count) {
  for (int i = 0; i < count; i += 4) {
    float lanes[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int n = count - i < 4 ? count - i : 4;
    memcpy(lanes, input + i, (size_t)n * sizeof(float));
    vst1q_f32(lanes, fcn_exp2(vld1q_f32(lanes)));
    memcpy(output + i, lanes, (size_t)n * sizeof(float));
  }
}
