/* What every split-KV decode kernel (AVX-512's, and the fcv_* template's
 * for AVX2 and NEON) does the same way around its key-block loop: which kv
 * heads and keys a tile takes, where the partial states live, the per-key
 * work a dot product does not do, the prefetch sweeps of a block, and the
 * merge of the splits (in the split launch by a head group's last writer,
 * or by a merge launch), so that every ISA merges with the same fixed tree.
 * Portable C (baseline TU). */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_COMMON_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_COMMON_H

#include <stdint.h>

#include "common/portable_atomic.h"
#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/decode/decode_splitkv.h"
#include "kernels/kernel_plan.h"
#include "kernels/kernel_support.h"
#include "runtime/runtime.h"

struct fc_prefetch_sweep;

/* Stores o[0..dv) times factor as dtype at out with fc_store_row's bits,
 * o in even/odd order per `pair` elements (0: natural order; else the
 * ISA's DS_PAIR): an ISA's vector stores of an output row. */
typedef void (*fc_splitkv_store_fn)(const float *o, int64_t pair, float factor,
                                    int64_t dv, flashcpu_dtype dtype,
                                    void *out);

typedef struct fc_splitkv_shared {
  const fc_problem *p;
  fc_splitkv_plan plan;
  int64_t heads_per_tile; /* kv heads a tile takes (a divisor of kv_heads) */
  int64_t head_groups;    /* kv_heads / heads_per_tile */
  /* No softcap or additive mask: the factor q is scaled by carries log2(e)
   * and a dot product is the final log2-domain score. */
  int scores_final;
  float q_factor;
  /* Some score needs per-key work after the dot (fc_splitkv_finish). */
  int needs_finish;
  /* The block sweeps prefetch into L1 (the decode_prefetch setting). */
  int prefetch_l1;
  /* K or V lies in pages of at most 4 KiB: each block touches the pages
   * of the block after the next (fc_splitkv_touch_pages). */
  int touches_pages;
  float *partials; /* [batch][kv head][split of b][slot of b] records */
  /* Per batch (and one past the last), in the call workspace: its first
   * split tile, first state record and first merge tile. */
  int64_t *tile_starts, *record_starts, *merge_starts;
  /* Merge in the split launch: records written per (batch, head group),
   * NULL where a merge launch follows instead. */
  fc_atomic_int *records_done;
  /* The plan's launch shape and workspace layout (fc_splitkv_plan_args). */
  fc_tile_kernel tile;
  int64_t tiles, merges, groups;
  int merge_in_launch;
  /* The tile kernel writes the output rows of a batch with one split
   * itself (fc_splitkv_write_row): no records, no merge; 0: it writes
   * records for every batch. */
  int writes_single;
  /* The output rows' stores (NULL: fc_store_row, a pair at a time). */
  fc_splitkv_store_fn store_row;
  size_t starts_offset, counters_offset;
} fc_splitkv_shared;

/* The plan, score factor and finishing work of p, the prefetch hint of
 * the settings (heads_per_tile and the workspace come with
 * fc_splitkv_plan_args). */
void fc_splitkv_shared_init(fc_splitkv_shared *s, const fc_problem *p,
                            const fc_kernel_settings *settings);

/* What the split-KV driver (decode_splitkv_driver.inc) hands each ISA's
 * micro-kernels: the shape as the loops read it, fixed for the call. */
typedef struct fc_splitkv_args {
  fc_splitkv_shared shared; /* plan, heads per tile, partial states */
  const fc_problem *p;
  const fc_row_to_f32_fn *row_to_f32;
  fc_dequant_row_fn dequant_row;
  int64_t chunks;     /* ceil(slots / FC_SPLITKV_CHUNK) per kv head */
  int64_t padded_dim; /* head_dim up to whole loads: q rows zero-padded */
  int64_t padded_dv;  /* v_head_dim up to whole values passes */
  /* The dtype the loops read: the row's where rows are read in place, f32
   * where they are first copied (staged). */
  flashcpu_dtype k_read, v_read;
  int k_in_place, v_in_place;
  int stages;           /* some rows are staged: the thread scratch has room */
  int q_pairs, o_pairs; /* bf16 read widened: even/odd order per pair */
  /* bf16 q and K (bf16, or fp8 read in place) by dot products on the raw
   * rows (q copied unscaled, q_factor applied to the sums); NULL: K
   * widened to f32 and FMA. */
  fc_splitkv_bf16_scores_fn bf16_scores;
  /* I8/U8 K read in place by integer dot products with q rounded to
   * integers per row (chunks whose q is not finite take the f32 path);
   * NULL: none. */
  fc_splitkv_int_scores_fn int_scores;
  int int_q_limit; /* q's codes within +-int_q_limit: 16383 (int16) or 127
                      (int8, fc_splitkv_int_q's bytes) */
  /* I8/U8 V read in place by integer dot products, for the chunks whose
   * scores are integer ones; NULL: none. */
  fc_splitkv_int_values_fn int_values;
  /* F8 K and V read in place before their row scale, which multiplies each
   * key's dot products and weights instead (AVX-512's F8 row); 0: each
   * element dequantized. */
  int f8_unscaled;
} fc_splitkv_args;

/* Where a tile lies: batch, first kv head, split, (batch, head group)
 * index, the keys [begin, end) of the split some row of the tile sees
 * (begin >= end: none), and the batch's slots (its rows x group). */
typedef struct fc_splitkv_tile {
  int64_t b, h0, split, group;
  int64_t begin, end, kv_length;
  int64_t slots;
} fc_splitkv_tile;

fc_splitkv_tile fc_splitkv_locate(const fc_splitkv_shared *s, int64_t tile);

/* Slots (query rows x group heads) of batch b. */
static inline int64_t fc_splitkv_slots_of(const fc_splitkv_shared *s,
                                          int64_t b) {
  return fc_problem_q_len(s->p, b) * s->p->group;
}

/* The state record of (batch b, kv head, split, slot). */
float *fc_splitkv_record(const fc_splitkv_shared *s, int64_t b, int64_t kv_head,
                         int64_t split, int64_t slot);

/* Finishes scores s[0..n) of slot for keys j0.. of (b, kv_head): -inf for
 * keys the slot's row does not see (key range, tree) and for padding
 * slots, softcap and additive mask where scores are not final. */
void fc_splitkv_finish(const fc_splitkv_shared *s, float *scores, int64_t b,
                       int64_t kv_head, int64_t slot, int64_t j0, int64_t n,
                       int64_t kv_length);

/* Where the K and V rows of head 0 of a block of keys lie: one page
 * lookup per key of a paged cache, shared by every head of the tile and by
 * the sweeps that prefetch the block. */
typedef struct fc_splitkv_block_rows {
  int64_t key, count; /* keys [key, key + count) */
  const char *k[FC_SPLITKV_KEY_BLOCK], *v[FC_SPLITKV_KEY_BLOCK];
} fc_splitkv_block_rows;

/* A block's rows of one kv head as the micro-kernels read them: where each
 * lies (rows past the block's count repeat its last), and for quantized
 * rows read in place, each row's scale and zero point (1 and 0 where the
 * view has none): the row's value d is (code_d - zero) * scale. */
typedef struct fc_splitkv_rows {
  const char *row[FC_SPLITKV_KEY_BLOCK];
  float scale[FC_SPLITKV_KEY_BLOCK], zero[FC_SPLITKV_KEY_BLOCK];
} fc_splitkv_rows;

/* The rows of keys [key, min(key + FC_SPLITKV_KEY_BLOCK, end)) of batch b
 * (count 0 when key >= end). */
void fc_splitkv_block_rows_fill(const fc_splitkv_shared *s, int64_t b,
                                int64_t key, int64_t end,
                                fc_splitkv_block_rows *rows);

/* A prefetch of the first line of every 4 KiB page that keys [key, key +
 * FC_SPLITKV_KEY_BLOCK) of batch b (below end) touch in K and V, heads
 * from h0 (nothing unless s->touches_pages). With pages of a token or a
 * few, each key's rows lie in a page of their own: the page walks and the
 * first lines of the block after the next then start while this block
 * computes, rather than when the sweep of the next block reaches them
 * (docs/performance.md). */
void fc_splitkv_touch_pages(const fc_splitkv_shared *s, int64_t b, int64_t key,
                            int64_t end, int64_t h0);

/* fc_splitkv_touch_pages of the block two after the one at j0 of tile t,
 * which past t's last block is one of after's first two (after: the tile
 * the same thread runs next, NULL if none). Each block's 32 page walks
 * (pages of 1) then start together two blocks before it is read, across
 * the tiles of a chained team too, rather than when the sweep of the block
 * before reaches each key (touched one at a time, they took longer: each
 * holds back retirement for its own walk). */
void fc_splitkv_touch_ahead(const fc_splitkv_shared *s,
                            const fc_splitkv_tile *t,
                            const fc_splitkv_tile *after, int64_t j0);

/* Sweeps over the K and V rows of the tile's heads (from h0) of a block
 * (empty when it has no keys). */
void fc_splitkv_block_sweeps(const fc_splitkv_shared *s,
                             const fc_splitkv_block_rows *rows, int64_t h0,
                             struct fc_prefetch_sweep *k_sweep,
                             struct fc_prefetch_sweep *v_sweep);

/* bf16 rows widened with one shift (even elements) and one and (odd ones)
 * come out in even/odd order per `pair` elements: d, d + 2, ... then d + 1,
 * d + 3, ...; q and the outputs are kept in that order. Where element i of
 * a row lies in it (pair 0: natural order). */
static inline int64_t fc_splitkv_paired_index(int64_t i, int64_t pair) {
  if (pair == 0) return i;
  const int64_t base = i / pair * pair, k = i % pair;
  return base + (k % 2) * (pair / 2) + k / 2;
}

/* Puts row[0..padded) (a multiple of pair, pair <= 64) into that order. */
void fc_splitkv_to_pairs(float *row, int64_t padded, int64_t pair);

/* Writes a partial state record: m, l and o[0..dv) back in natural order
 * from pair order (pair 0: o is in natural order). m == -inf writes an
 * empty state (m only; l and o are not read). */
void fc_splitkv_write_state(float *record, float m, float l, const float *o,
                            int64_t dv, int64_t pair);

/* Output row of (batch b, kv head, slot) from its state m, l and
 * unnormalised o in pair order (fc_splitkv_write_state's arguments) and
 * its log-sum-exp: the bytes a record of that state merged alone writes. */
void fc_splitkv_write_row(const fc_splitkv_shared *s, int64_t b,
                          int64_t kv_head, int64_t slot, float m, float l,
                          const float *o, int64_t pair);

/* Whether batch b's rows come straight from its one split's tile
 * (s->writes_single and one split): no records, no merge. */
static inline int fc_splitkv_writes_rows(const fc_splitkv_shared *s,
                                         int64_t b) {
  return s->writes_single &&
         fc_splitkv_splits_of(&s->plan, fc_problem_kv_length(s->p, b)) == 1;
}

/* After a thread wrote `written` records of tile t: where the split launch
 * merges, the thread that completes the head group merges it and writes
 * its rows. */
void fc_splitkv_tile_written(const fc_splitkv_shared *s,
                             const fc_splitkv_tile *t, int written);

/* Plans a split-KV kernel from its arguments (size bytes; they start
 * with an fc_splitkv_args' shared and p, and become the plan's state):
 * heads per tile for the runtime's teams, the partial states' workspace,
 * the team scratch (scratch(args, team size), called after heads_per_tile
 * is set), `tile` over every (batch, head group, split), and the merge
 * launch after it where the split launch cannot merge. */
flashcpu_status fc_splitkv_plan_args(const fc_kernel_env *env,
                                     fc_kernel_plan *plan, const void *args,
                                     size_t size, fc_tile_kernel tile,
                                     fc_scratch_bytes_fn scratch);

#endif
