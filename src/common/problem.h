/* One attention call after argument checking: every field validated, the
 * defaults resolved. Kernels read only this. */
#ifndef FLASHCPU_COMMON_PROBLEM_H
#define FLASHCPU_COMMON_PROBLEM_H

#include <stdbool.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"

typedef struct fc_view {
  const char *data; /* bytes; inputs only read */
  flashcpu_dtype dtype;
  int64_t element_size;
  int64_t strides[4]; /* [batch, seq, heads, head_dim] in elements */
} fc_view;

typedef struct fc_problem {
  int64_t batch, q_len, kv_capacity, q_heads, kv_heads, group;
  int64_t head_dim, v_head_dim;
  fc_view q, k, v, out;
  float *lse; /* [batch, q_heads, q_len] or NULL */
  float scale;
  float softcap; /* 0: off */
  bool causal;
  int64_t window_left, window_right; /* -1: unbounded */
  const flashcpu_tree_mask *tree;             /* NULL: none */
  const flashcpu_additive_mask *additive;     /* NULL: none */
  const int64_t *kv_lengths;                  /* NULL: kv_capacity each */
} fc_problem;

static inline int64_t fc_problem_kv_length(const fc_problem *p, int64_t b) {
  return p->kv_lengths ? p->kv_lengths[b] : p->kv_capacity;
}

/* Address of element (b, s, h, 0) of a view. */
static inline const char *fc_view_row(const fc_view *view, int64_t b,
                                      int64_t s, int64_t h) {
  return view->data + (b * view->strides[0] + s * view->strides[1] +
                       h * view->strides[2]) * view->element_size;
}

#endif
