/* Writing a step's new K/V rows into their pages (flashcpu_kv_append),
 * converting dtypes on the way. Portable C (baseline TU). */
#ifndef FLASHCPU_KERNELS_APPEND_KV_APPEND_H
#define FLASHCPU_KERNELS_APPEND_KV_APPEND_H

#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/convert/quantize_row.h"
#include "kernels/kernel_env.h"

/* One side (K or V) of an append: rows (0, t, head) of source go to
 * `cache` + page * strides[0] + offset * strides[1] + head * strides[2]. */
typedef struct fc_append_side {
  fc_view source;
  char *cache;
  flashcpu_dtype cache_dtype;
  int64_t byte_strides[3]; /* [page, slot, head] */
  int64_t dim;
  /* Quantized pages: their scales (NULL: none), strides [page, slot,
   * head, channel] in elements of scale_dtype, computed per token or read. */
  char *scales, *zeros;
  flashcpu_dtype scale_dtype;
  int64_t scale_strides[4];
  bool scales_computed;
} fc_append_side;

/* The cache row of (page, offset, head) and, for quantized pages, where
 * its scales go. */
char *fc_append_target(const fc_append_side *side, int64_t page, int64_t offset,
                       int64_t head, fc_row_scales_out *scales);

/* A checked append: every slot is -1 or in range, none twice. */
typedef struct fc_append_problem {
  int64_t tokens, kv_heads, page_size;
  const int64_t *slots;
  fc_append_side sides[2];
} fc_append_problem;

flashcpu_status fc_kv_append_run(const fc_kernel_env *env,
                                 const fc_append_problem *a);

#endif
