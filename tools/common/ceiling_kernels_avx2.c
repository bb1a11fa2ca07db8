/* AVX2 ceiling loops: 8 fp32 lanes, eight 32-byte loads per iteration for
 * reads, TOOLKIT_FMA_CHAINS ymm accumulators for FMA. */
#include <immintrin.h>

#include "common/ceiling_kernels.h"

static float horizontal_sum(__m256 v) {
  __m128 half =
      _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  return _mm_cvtss_f32(half);
}

static float read_sum_avx2(const float *data, size_t count) {
  __m256 sum[8];
  for (int s = 0; s < 8; s++) sum[s] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= count; i += 64)
    for (int s = 0; s < 8; s++)
      sum[s] = _mm256_add_ps(sum[s], _mm256_loadu_ps(data + i + 8 * s));
  float tail = 0.0f;
  for (; i < count; i++) tail += data[i];
  for (int s = 1; s < 8; s++) sum[0] = _mm256_add_ps(sum[0], sum[s]);
  return horizontal_sum(sum[0]) + tail;
}

static float fma_loop_avx2(int64_t iterations, float multiplier, float addend) {
  __m256 acc[TOOLKIT_FMA_CHAINS];
  for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
    acc[c] = _mm256_set1_ps(1.0f + 0.01f * (float)c);
  const __m256 m = _mm256_set1_ps(multiplier);
  const __m256 a = _mm256_set1_ps(addend);
  for (int64_t i = 0; i < iterations; i++)
    for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
      acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  __m256 total = acc[0];
  for (int c = 1; c < TOOLKIT_FMA_CHAINS; c++)
    total = _mm256_add_ps(total, acc[c]);
  return horizontal_sum(total);
}

toolkit_ceiling_kernels toolkit_ceiling_kernels_avx2(void) {
  toolkit_ceiling_kernels kernels = {"avx2", 8, read_sum_avx2, fma_loop_avx2};
  return kernels;
}
