/* What every attention kernel does the same way around its inner loops:
 * sizing and reserving team scratch before anything is written, and
 * finishing an output row from its online-softmax state. Portable C
 * (baseline TU). */
#ifndef FLASHCPU_KERNELS_KERNEL_SUPPORT_H
#define FLASHCPU_KERNELS_KERNEL_SUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/kernel_env.h"
#include "kernels/kernel_plan.h"

/* Clears plan and copies a kernel's arguments (size bytes) in as its
 * state; INTERNAL (reason in env) where they do not fit. */
flashcpu_status fc_kernel_plan_start(const fc_kernel_env *env,
                                     fc_kernel_plan *plan, const void *args,
                                     size_t size);

/* Bytes of scratch a team of team_size threads needs for this kernel. */
typedef size_t (*fc_scratch_bytes_fn)(const void *args, int team_size);

/* The largest team's need: what a plan's scratch_bytes holds. */
size_t fc_kernel_scratch_bytes(const fc_runtime *runtime,
                               fc_scratch_bytes_fn bytes_for, const void *args);

/* Makes every team's scratch large enough for the largest team's need;
 * OUT_OF_MEMORY (with the reason in env) leaves outputs untouched. */
flashcpu_status fc_kernel_reserve_scratch(const fc_kernel_env *env,
                                          fc_scratch_bytes_fn bytes_for,
                                          const void *args);

/* The scales of row (b, s, h) of a quantized view. */
static inline fc_row_scales fc_view_row_scales(const fc_view *view, int64_t b,
                                               int64_t s, int64_t h) {
  fc_row_scales scales = {NULL, NULL, view->scale_dtype,
                          view->scale_strides[3]};
  if (view->scales || view->zeros) {
    const int64_t at = fc_view_scale_offset(view, b, s, h) * view->scale_size;
    if (view->scales) scales.scales = view->scales + at;
    if (view->zeros) scales.zeros = view->zeros + at;
  }
  return scales;
}

/* The scale and zero point of rows s .. s + n - 1 of (b, h) of a quantized
 * view whose scales do not vary along a row (1 and 0 where it has none):
 * one offset per run of rows (a page, or the whole range), then a stride. */
static inline void fc_view_block_scales(const fc_view *view, int64_t b,
                                        int64_t s, int64_t n, int64_t h,
                                        float *scale, float *zero) {
  /* f32 scales in one run (a contiguous cache, or a block within a page):
   * the branches out of the per-key loop, which runs for every block. */
  if (view->scale_dtype == FLASHCPU_DTYPE_F32 &&
      fc_view_run_end(view, s) >= s + n) {
    const int64_t at = fc_view_scale_offset(view, b, s, h);
    const int64_t step = view->scale_strides[1];
    if (view->scales)
      for (int64_t j = 0; j < n; j++)
        memcpy(&scale[j], view->scales + (at + j * step) * 4, sizeof(float));
    else
      for (int64_t j = 0; j < n; j++) scale[j] = 1.0f;
    if (view->zeros)
      for (int64_t j = 0; j < n; j++)
        memcpy(&zero[j], view->zeros + (at + j * step) * 4, sizeof(float));
    else
      for (int64_t j = 0; j < n; j++) zero[j] = 0.0f;
    return;
  }
  for (int64_t j = 0; j < n;) {
    const int64_t run_end = fc_view_run_end(view, s + j);
    const int64_t at = fc_view_scale_offset(view, b, s + j, h);
    const int64_t step = view->scale_strides[1];
    for (int64_t i = 0; j < n && s + j < run_end; j++, i++) {
      scale[j] = view->scales ? fc_scale_load(view->scales, view->scale_dtype,
                                              at + i * step)
                              : 1.0f;
      zero[j] = view->zeros ? fc_scale_load(view->zeros, view->scale_dtype,
                                            at + i * step)
                            : 0.0f;
    }
  }
}

/* Prefetches the scales (and zero points) of rows s .. s + n - 1 of (b, h)
 * of a quantized view: the K/V sweeps cover the rows, not their scales,
 * whose misses would otherwise stall each block's first loads. */
static inline void fc_view_prefetch_scales(const fc_view *view, int64_t b,
                                           int64_t s, int64_t n, int64_t h) {
  if (!view->quantized || (!view->scales && !view->zeros)) return;
  for (int64_t j = 0; j < n; j++) {
    const int64_t at =
        fc_view_scale_offset(view, b, s + j, h) * view->scale_size;
    if (view->scales) __builtin_prefetch(view->scales + at);
    if (view->zeros) __builtin_prefetch(view->zeros + at);
  }
}

/* Row (b, s, h) of a K or V view, lying at row, as count f32 values:
 * widened (f32, f16, bf16) or dequantized. */
static inline void fc_kv_row_to_f32(const fc_row_to_f32_fn *row_to_f32,
                                    fc_dequant_row_fn dequant_row,
                                    const fc_view *view, const char *row,
                                    int64_t b, int64_t s, int64_t h,
                                    int64_t count, float *out) {
  if (!view->quantized) {
    row_to_f32[view->dtype](row, count, 1.0f, out);
    return;
  }
  const fc_row_scales scales = fc_view_row_scales(view, b, s, h);
  dequant_row(view->dtype, row, count, &scales, out);
}

/* How output row (b, row, head) is finished from running max m (log2
 * domain) and sum l: writes its log-sum-exp and returns true with the
 * factor that multiplies the unnormalised o, or false for a row of zeros
 * (it saw no key: lse -inf, or the sink's). */
bool fc_output_factor(const fc_problem *p, int64_t b, int64_t row, int64_t head,
                      float m, float l, float *factor);

/* Writes output row (b, row, head) from m, l and unnormalised o, and its
 * log-sum-exp (fc_output_factor). */
void fc_write_output_row(const fc_problem *p, int64_t b, int64_t row,
                         int64_t head, float m, float l, const float *o);

#endif
