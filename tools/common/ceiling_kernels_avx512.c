/* AVX-512 ceiling loops: 16 fp32 lanes, four 64-byte loads per iteration for
 * reads, TOOLKIT_FMA_CHAINS zmm accumulators for FMA. */
#include <immintrin.h>

#include "common/ceiling_kernels.h"

static float read_sum_avx512(const float *data, size_t count) {
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  __m512 sum2 = _mm512_setzero_ps(), sum3 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= count; i += 64) {
    sum0 = _mm512_add_ps(sum0, _mm512_loadu_ps(data + i));
    sum1 = _mm512_add_ps(sum1, _mm512_loadu_ps(data + i + 16));
    sum2 = _mm512_add_ps(sum2, _mm512_loadu_ps(data + i + 32));
    sum3 = _mm512_add_ps(sum3, _mm512_loadu_ps(data + i + 48));
  }
  float tail = 0.0f;
  for (; i < count; i++) tail += data[i];
  __m512 total =
      _mm512_add_ps(_mm512_add_ps(sum0, sum1), _mm512_add_ps(sum2, sum3));
  return _mm512_reduce_add_ps(total) + tail;
}

static float fma_loop_avx512(int64_t iterations, float multiplier,
                             float addend) {
  __m512 acc[TOOLKIT_FMA_CHAINS];
  for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
    acc[c] = _mm512_set1_ps(1.0f + 0.01f * (float)c);
  const __m512 m = _mm512_set1_ps(multiplier);
  const __m512 a = _mm512_set1_ps(addend);
  for (int64_t i = 0; i < iterations; i++)
    for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
      acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  __m512 total = acc[0];
  for (int c = 1; c < TOOLKIT_FMA_CHAINS; c++)
    total = _mm512_add_ps(total, acc[c]);
  return _mm512_reduce_add_ps(total);
}

toolkit_ceiling_kernels toolkit_ceiling_kernels_avx512(void) {
  toolkit_ceiling_kernels kernels = {"avx512", 16, read_sum_avx512,
                                     fma_loop_avx512};
  return kernels;
}
