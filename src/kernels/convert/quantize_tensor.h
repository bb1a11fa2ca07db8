/* flashcpu_quantize and flashcpu_dequantize over the runtime: rows
 * (b, s, h) in tiles, each thread converting whole rows. */
#ifndef FLASHCPU_KERNELS_CONVERT_QUANTIZE_TENSOR_H
#define FLASHCPU_KERNELS_CONVERT_QUANTIZE_TENSOR_H

#include <stdbool.h>

#include "common/problem.h"
#include "kernels/convert/quantize_row.h"
#include "kernels/kernel_env.h"

/* A checked conversion of every row of dims [B, S, H, D]: source and
 * target views (one of them quantized, with its scales in the view). */
typedef struct fc_quantize_problem {
  int64_t dims[4];
  fc_view source, target;
  bool quantize; /* else dequantize */
  bool scales_computed;
} fc_quantize_problem;

/* Where row (b, s, h) of a quantized view's scales lie, writable. */
fc_row_scales_out fc_quantize_row_scales(const fc_view *view, int64_t b,
                                         int64_t s, int64_t h, bool computed);

flashcpu_status fc_quantize_run(const fc_kernel_env *env,
                                const fc_quantize_problem *q);

#endif
