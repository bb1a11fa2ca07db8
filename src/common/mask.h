/* Which keys a query row sees under causal + sliding window, and how a
 * (rows x keys) tile is classified. Shared by every kernel so that they all
 * skip and mask exactly the same tiles. */
#ifndef FLASHCPU_COMMON_MASK_H
#define FLASHCPU_COMMON_MASK_H

#include <stdint.h>

#include "common/problem.h"

/* The half-open key range [begin, end) that row `row` of batch b sees
 * before the tree and additive masks; begin >= end when it sees nothing. */
typedef struct fc_key_range {
  int64_t begin, end;
} fc_key_range;

static inline fc_key_range fc_row_key_range(const fc_problem *p, int64_t b,
                                            int64_t kv_length, int64_t row) {
  const int64_t position = fc_problem_position(p, b, kv_length, row);
  fc_key_range range = {0, kv_length};
  /* Windows may be as wide as INT64_MAX: compare distances, never form
   * position - left or position + right + 1 where they could overflow. */
  if (p->window_left >= 0 && p->window_left < position)
    range.begin = position - p->window_left;
  /* A query offset can put the window past the keys. */
  if (range.begin > kv_length) range.begin = kv_length;
  if (p->causal && position + 1 < range.end) range.end = position + 1;
  if (p->window_right >= 0 && p->window_right < range.end - 1 - position)
    range.end = position + p->window_right + 1;
  if (range.end < range.begin) range.end = range.begin;
  return range;
}

typedef enum fc_tile_kind {
  FC_TILE_EMPTY,  /* no row sees any key: skip without loading K/V */
  FC_TILE_FULL,   /* every row sees every key: no per-element mask work */
  FC_TILE_PARTIAL /* rows clamp to their range; tree bits per element */
} fc_tile_kind;

/* First key of the tree-masked region of batch b (kv_length: none). */
static inline int64_t fc_tree_begin(const fc_problem *p, int64_t b,
                                    int64_t kv_length) {
  if (!p->tree) return kv_length;
  return kv_length - (p->tree_keys ? p->tree_keys[b] : p->tree->num_keys);
}

/* Classifies rows [row_begin, row_end) x keys [key_begin, key_end). Ranges
 * grow monotonically with the row, so the first and last rows bound them. */
static inline fc_tile_kind fc_classify_tile(const fc_problem *p, int64_t b,
                                            int64_t kv_length,
                                            int64_t row_begin, int64_t row_end,
                                            int64_t key_begin,
                                            int64_t key_end) {
  fc_key_range first = fc_row_key_range(p, b, kv_length, row_begin);
  fc_key_range last = fc_row_key_range(p, b, kv_length, row_end - 1);
  int64_t union_begin = first.begin, union_end = last.end;
  if (key_end <= union_begin || key_begin >= union_end) return FC_TILE_EMPTY;
  /* Every row sees the tile when the last row's begin and the first row's
   * end both enclose it. */
  if (last.begin <= key_begin && key_end <= first.end &&
      key_end <= fc_tree_begin(p, b, kv_length))
    return FC_TILE_FULL;
  return FC_TILE_PARTIAL;
}

/* Whether the tree mask lets row `row` of batch b see key `key` (a key
 * in the tree region). */
static inline int fc_tree_allows(const fc_problem *p, int64_t b, int64_t row,
                                 int64_t key, int64_t tree_begin) {
  const flashcpu_tree_mask *tree = p->tree;
  int64_t bit = key - tree_begin;
  uint64_t word =
      tree->bits[b * tree->batch_stride +
                 (fc_problem_q_start(p, b) + row) * tree->row_stride +
                 bit / 64];
  return (int)((word >> (bit % 64)) & 1u);
}

#endif
