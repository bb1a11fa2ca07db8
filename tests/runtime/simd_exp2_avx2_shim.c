/* Exposes the AVX2 exp2 to the C++ test. Compiled with the AVX2 flags
 * (x86-64 only); the test calls it only after flashcpu_isa_supported(AVX2). */
#include <string.h>

#include "simd/simd_avx2.h"

void fc_test_exp2_avx2(const float *input, float *output, int count) {
  for (int i = 0; i < count; i += 8) {
    /* The tail goes through a zero-padded copy: AVX2 has no masked store
     * for floats that is as simple as AVX-512's. */
    float lanes[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int n = count - i < 8 ? count - i : 8;
    memcpy(lanes, input + i, (size_t)n * sizeof(float));
    _mm256_storeu_ps(lanes, fc256_exp2(_mm256_loadu_ps(lanes)));
    memcpy(output + i, lanes, (size_t)n * sizeof(float));
  }
}
