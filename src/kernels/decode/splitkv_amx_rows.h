/* Where the AMX decode driver (splitkv_amx_driver.inc) finds a split's K
 * and V rows, their scales, and the sweeps that prefetch the next block:
 * rows found by stride where a split's rows are evenly spaced, else looked
 * up per block as the vector kernels do. Include in a TU built with
 * AVX-512 flags. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_ROWS_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_ROWS_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/kernel_support.h"

/* Where a tile's rows of one kv head lie: evenly spaced across the split
 * (a contiguous cache, or a page that holds the split), or looked up per
 * block. */
typedef struct row_walk {
  const fc_view *view;
  int64_t b, kv_head, head_bytes;
  const char *first; /* the split's first row where evenly spaced, else NULL */
  int64_t step;
} row_walk;

static inline row_walk walk_rows(const fc_view *view, const fc_splitkv_tile *t,
                                 int64_t kv_head) {
  row_walk w = {view,    t->b,
                kv_head, kv_head * view->strides[2] * view->element_size,
                NULL,    view->strides[1] * view->element_size};
  if (fc_view_run_end(view, t->begin) >= t->end)
    w.first = fc_view_row(view, t->b, t->begin, kv_head);
  return w;
}

/* A sweep over keys [key, key + keys) of the tile's heads (rows evenly
 * spaced; else, or past the split, an empty one): the next block's or
 * group's lines, one per call of fc_sweep_next spread over the work (a
 * burst of prefetches stalls the loads behind it). */
static inline fc_prefetch_sweep sweep_keys(const fc_splitkv_shared *shared,
                                           const fc_view *view,
                                           const fc_splitkv_tile *t,
                                           int64_t key, int64_t keys,
                                           int64_t row_bytes) {
  fc_prefetch_sweep sweep;
  const row_walk walk = walk_rows(view, t, t->h0);
  if (key + keys > t->end) keys = t->end - key;
  fc_sweep_init(&sweep,
                walk.first ? walk.first + (key - t->begin) * walk.step : NULL,
                walk.first ? keys : 0, shared->heads_per_tile, walk.step,
                view->strides[2] * view->element_size, row_bytes);
  sweep.into_l1 = shared->prefetch_l1 != 0;
  return sweep;
}

/* n lines of a sweep. */
static inline __attribute__((always_inline)) void
sweep_lines(fc_prefetch_sweep *sweep, int64_t n) {
  for (int64_t i = 0; i < n; i++) fc_sweep_next(sweep);
}

/* 16 f32 scales (or zeros) from element at, step apart. */
static inline __attribute__((always_inline)) __m512
load16(const char *base, int64_t at, int64_t step) {
  const char *first = base + at * (int64_t)sizeof(float);
  if (step == 0) {
    float value;
    memcpy(&value, first, sizeof value); /* scales need not be aligned */
    return _mm512_set1_ps(value);
  }
  if (step == 1) return _mm512_loadu_ps(first);
  const __m512i index = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32((int)step));
  return _mm512_i32gather_ps(index, first, 4);
}

/* A block of 16 keys of one kv head: evenly spaced rows from base (a full
 * block of a walk with a first row), else each row (past the split's end
 * the last repeated); the rows' scales and zeros. */
typedef struct key_block {
  const char *base;
  int64_t stride;
  bool spaced;
  const char *rows[FC_SPLITKV_KEY_BLOCK];
  __m512 scale, zero;
} key_block;

static inline __attribute__((always_inline)) void
block_at(const fc_splitkv_shared *shared, const row_walk *w,
         const fc_splitkv_tile *t, int64_t key, bool is_k, key_block *out) {
  const fc_view *view = w->view;
  const int64_t count =
      t->end - key < FC_SPLITKV_KEY_BLOCK ? t->end - key : FC_SPLITKV_KEY_BLOCK;
  out->spaced = w->first && count == FC_SPLITKV_KEY_BLOCK;
  if (out->spaced) {
    out->base = w->first + (key - t->begin) * w->step;
    out->stride = w->step;
  } else {
    if (w->first) {
      const char *row = w->first + (key - t->begin) * w->step;
      for (int64_t j = 0; j < count; j++, row += w->step) out->rows[j] = row;
    } else {
      fc_splitkv_block_rows block;
      fc_splitkv_block_rows_fill(shared, t->b, key, t->end, &block);
      const char *const *head0 = is_k ? block.k : block.v;
      for (int64_t j = 0; j < count; j++)
        out->rows[j] = head0[j] + w->head_bytes;
    }
    for (int64_t j = count; j < FC_SPLITKV_KEY_BLOCK; j++)
      out->rows[j] = out->rows[count - 1];
    out->base = out->rows[0];
    out->stride = 0;
  }
  if (count == FC_SPLITKV_KEY_BLOCK &&
      view->scale_dtype == FLASHCPU_DTYPE_F32 && view->scale_strides[1] >= 0 &&
      view->scale_strides[1] <= INT32_MAX / FC_SPLITKV_KEY_BLOCK &&
      fc_view_run_end(view, key) >= key + FC_SPLITKV_KEY_BLOCK) {
    const int64_t at = fc_view_scale_offset(view, w->b, key, w->kv_head);
    const int64_t step = view->scale_strides[1];
    out->scale =
        view->scales ? load16(view->scales, at, step) : _mm512_set1_ps(1.0f);
    out->zero =
        view->zeros ? load16(view->zeros, at, step) : _mm512_setzero_ps();
    return;
  }
  float scale[FC_SPLITKV_KEY_BLOCK], zero[FC_SPLITKV_KEY_BLOCK];
  fc_view_block_scales(view, w->b, key, count, w->kv_head, scale, zero);
  for (int64_t j = count; j < FC_SPLITKV_KEY_BLOCK; j++) {
    scale[j] = scale[count - 1];
    zero[j] = zero[count - 1];
  }
  out->scale = _mm512_loadu_ps(scale);
  out->zero = _mm512_loadu_ps(zero);
}

/* Row j of a block. */
static inline __attribute__((always_inline)) const char *
row_of(const key_block *block, int j) {
  return block->spaced ? block->base + j * block->stride : block->rows[j];
}

#endif
