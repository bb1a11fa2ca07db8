/* One attention call after argument checking: every field validated, the
 * defaults resolved. Kernels read only this.
 *
 * A problem is a batch of sequences. flashcpu_attention's batches are
 * uniform (q_len rows each, at b * strides[0]); a paged step's are ragged:
 * per-batch row counts, rows packed one after another, K/V in pages. The
 * accessors below hide the difference from the kernels. */
#ifndef FLASHCPU_COMMON_PROBLEM_H
#define FLASHCPU_COMMON_PROBLEM_H

#include <stdbool.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"

typedef struct fc_view {
  const char *data; /* bytes; inputs only read */
  flashcpu_dtype dtype;
  int64_t element_size;
  /* [batch, seq, heads, head_dim] in elements; paged: [page, slot in the
   * page, heads, head_dim]. */
  int64_t strides[4];
  /* Packed rows (q and out of a ragged batch): row s of batch b is packed
   * row row_starts[b] + s, and strides[0] is unused. NULL: b * strides[0]. */
  const int64_t *row_starts;
  /* Paged (K and V of a paged step): row s of batch b is slot
   * s % page_size of page pages[page_rows[b] + s / page_size]. NULL: not
   * paged. */
  const int32_t *pages;
  const int64_t *page_rows;
  int64_t page_size;
  int page_shift; /* log2(page_size) for a power of two, else -1: a shift
                     and a mask instead of a division per row */
  /* Quantized K/V (common/quant.h): element_size is 1 and, for Q8_0,
   * strides count bytes. Scales and zero points (NULL: 1 and 0) in
   * scale_dtype, at scale_strides [batch or page, seq or slot, head,
   * channel] in elements. */
  bool quantized;
  const char *scales, *zeros;
  flashcpu_dtype scale_dtype;
  int64_t scale_size; /* bytes of one scale */
  int64_t scale_strides[4];
} fc_view;

typedef struct fc_problem {
  /* q_len: rows of each batch, or the largest where q_lens is set;
   * kv_capacity: rows of the K/V views (paged: the largest kv length). */
  int64_t batch, q_len, kv_capacity, q_heads, kv_heads, group;
  int64_t head_dim, v_head_dim;
  fc_view q, k, v, out;
  /* lse of (b, head, row) at lse[b * lse_batch_stride + head *
   * lse_head_stride + q_start(b) + row]; NULL: not wanted. */
  float *lse;
  int64_t lse_batch_stride, lse_head_stride;
  float scale;
  float softcap; /* 0: off */
  bool causal;
  int64_t window_left, window_right; /* -1: unbounded */
  /* Tree bits of (b, row) at bits + b * batch_stride + (q_start(b) + row)
   * * row_stride; covering tree->num_keys keys, or tree_keys[b] where that
   * is set (0: batch b has none). */
  const flashcpu_tree_mask *tree; /* NULL: none */
  const int64_t *tree_keys;
  /* Additive mask of (b, head, row) at batch_id(b) * strides[0] + head *
   * strides[1] + (q_start(b) + row) * strides[2]. */
  const flashcpu_additive_mask *additive; /* NULL: none */
  const int64_t *kv_lengths;              /* NULL: kv_capacity each */
  /* Ragged batches (NULL for uniform ones): rows per batch, the packed row
   * of each batch's row 0, and the caller's index of each batch (its ALiBi
   * slopes and additive-mask batch). */
  const int64_t *q_lens, *q_starts, *batch_ids;
  /* ALiBi slopes of (b, head) at alibi[batch_id(b) * alibi_batch_stride +
   * head]; NULL: none. */
  const float *alibi;
  int64_t alibi_batch_stride;
  /* Room for batch + 1 per-batch tile starts a ragged prefill may use (a
   * plan's, so that a fused launch leaves the call workspace to split-KV);
   * NULL: the call workspace. */
  int64_t *tile_starts;
  /* Sink logits [q_heads] in sinks_dtype; NULL: none. */
  const void *sinks;
  flashcpu_dtype sinks_dtype;
  /* Added to the positions of batch_id(b)'s query rows; NULL: 0. */
  const int64_t *query_offsets;
} fc_problem;

static inline int64_t fc_problem_kv_length(const fc_problem *p, int64_t b) {
  return p->kv_lengths ? p->kv_lengths[b] : p->kv_capacity;
}

static inline int64_t fc_problem_q_len(const fc_problem *p, int64_t b) {
  return p->q_lens ? p->q_lens[b] : p->q_len;
}

static inline int64_t fc_problem_q_start(const fc_problem *p, int64_t b) {
  return p->q_starts ? p->q_starts[b] : 0;
}

static inline int64_t fc_problem_batch_id(const fc_problem *p, int64_t b) {
  return p->batch_ids ? p->batch_ids[b] : b;
}

/* The position of row `row` of batch b: bottom-right aligned to the
 * batch's kv_length, moved by its query offset. */
static inline int64_t fc_problem_position(const fc_problem *p, int64_t b,
                                          int64_t kv_length, int64_t row) {
  const int64_t position = row + (kv_length - fc_problem_q_len(p, b));
  return p->query_offsets
             ? position + p->query_offsets[fc_problem_batch_id(p, b)]
             : position;
}

/* Scores need work after the dot product (softcap, additive mask, ALiBi):
 * otherwise Q carries scale * log2(e) and a dot product is final. */
static inline bool fc_problem_scores_final(const fc_problem *p) {
  return p->softcap == 0.0f && !p->additive && !p->alibi;
}

/* Where row s of batch b lies: *outer (batch or page) and *inner (seq,
 * slot or packed row) index strides[0] and strides[1]. */
static inline void fc_view_place(const fc_view *view, int64_t b, int64_t s,
                                 int64_t *outer, int64_t *inner) {
  if (view->pages) {
    int64_t index;
    if (view->page_shift >= 0) {
      index = s >> view->page_shift;
      *inner = s & (view->page_size - 1);
    } else {
      index = s / view->page_size;
      *inner = s % view->page_size;
    }
    *outer = view->pages[view->page_rows[b] + index];
  } else if (view->row_starts) {
    *outer = 0;
    *inner = view->row_starts[b] + s;
  } else {
    *outer = b;
    *inner = s;
  }
}

/* Address of element (b, s, h, 0) of a view. */
static inline const char *fc_view_row(const fc_view *view, int64_t b, int64_t s,
                                      int64_t h) {
  int64_t outer, inner;
  fc_view_place(view, b, s, &outer, &inner);
  const int64_t at = outer * view->strides[0] + inner * view->strides[1];
  return view->data + (at + h * view->strides[2]) * view->element_size;
}

/* Element offset of (b, s, h, 0) in a quantized view's scales. */
static inline int64_t fc_view_scale_offset(const fc_view *view, int64_t b,
                                           int64_t s, int64_t h) {
  int64_t outer, inner;
  fc_view_place(view, b, s, &outer, &inner);
  return outer * view->scale_strides[0] + inner * view->scale_strides[1] +
         h * view->scale_strides[2];
}

/* Bytes of count elements of a row. */
static inline int64_t fc_view_row_bytes(const fc_view *view, int64_t count) {
  return view->dtype == FLASHCPU_DTYPE_Q8_0 ? count / 32 * 34
                                            : count * view->element_size;
}

/* Rows s, s + 1, ... of (b, h) lie one seq stride apart until this row
 * (exclusive): the end of s's page, else no end. */
static inline int64_t fc_view_run_end(const fc_view *view, int64_t s) {
  if (!view->pages) return INT64_MAX;
  if (view->page_shift >= 0)
    return (s & ~(view->page_size - 1)) + view->page_size;
  return s - s % view->page_size + view->page_size;
}

#endif
