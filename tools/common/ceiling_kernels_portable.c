/* Baseline ceiling loops. On aarch64 NEON is part of the baseline, so the
 * loops use it directly (4 lanes); elsewhere they are plain C over 8-wide
 * arrays that the compiler vectorises for the baseline ISA (a multiply and
 * an add when there is no FMA: still 2 flops per lane). */
#include "common/ceiling_kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>

static float read_sum_portable(const float *data, size_t count) {
  float32x4_t sum[4];
  for (int s = 0; s < 4; s++) sum[s] = vdupq_n_f32(0.0f);
  size_t i = 0;
  for (; i + 16 <= count; i += 16)
    for (int s = 0; s < 4; s++)
      sum[s] = vaddq_f32(sum[s], vld1q_f32(data + i + 4 * s));
  float tail = 0.0f;
  for (; i < count; i++) tail += data[i];
  return vaddvq_f32(
             vaddq_f32(vaddq_f32(sum[0], sum[1]), vaddq_f32(sum[2], sum[3]))) +
         tail;
}

static float fma_loop_portable(int64_t iterations, float multiplier,
                               float addend) {
  float32x4_t acc[TOOLKIT_FMA_CHAINS];
  for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
    acc[c] = vdupq_n_f32(1.0f + 0.01f * (float)c);
  const float32x4_t m = vdupq_n_f32(multiplier);
  const float32x4_t a = vdupq_n_f32(addend);
  for (int64_t i = 0; i < iterations; i++)
    for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
      acc[c] = vfmaq_f32(a, acc[c], m);
  float32x4_t total = acc[0];
  for (int c = 1; c < TOOLKIT_FMA_CHAINS; c++) total = vaddq_f32(total, acc[c]);
  return vaddvq_f32(total);
}

toolkit_ceiling_kernels toolkit_ceiling_kernels_portable(void) {
  toolkit_ceiling_kernels kernels = {"neon", 4, read_sum_portable,
                                     fma_loop_portable};
  return kernels;
}

#else
enum { PORTABLE_LANES = 8 };

static float read_sum_portable(const float *data, size_t count) {
  float sum[2 * PORTABLE_LANES] = {0};
  size_t i = 0;
  for (; i + 2 * PORTABLE_LANES <= count; i += 2 * PORTABLE_LANES)
    for (int lane = 0; lane < 2 * PORTABLE_LANES; lane++)
      sum[lane] += data[i + lane];
  float total = 0.0f;
  for (; i < count; i++) total += data[i];
  for (int lane = 0; lane < 2 * PORTABLE_LANES; lane++) total += sum[lane];
  return total;
}

static float fma_loop_portable(int64_t iterations, float multiplier,
                               float addend) {
  float acc[TOOLKIT_FMA_CHAINS][PORTABLE_LANES];
  for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
    for (int lane = 0; lane < PORTABLE_LANES; lane++)
      acc[c][lane] = 1.0f + 0.01f * (float)c;
  for (int64_t i = 0; i < iterations; i++)
    for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
      for (int lane = 0; lane < PORTABLE_LANES; lane++)
        acc[c][lane] = acc[c][lane] * multiplier + addend;
  float total = 0.0f;
  for (int c = 0; c < TOOLKIT_FMA_CHAINS; c++)
    for (int lane = 0; lane < PORTABLE_LANES; lane++) total += acc[c][lane];
  return total;
}

toolkit_ceiling_kernels toolkit_ceiling_kernels_portable(void) {
  toolkit_ceiling_kernels kernels = {"scalar", PORTABLE_LANES,
                                     read_sum_portable, fma_loop_portable};
  return kernels;
}
#endif
