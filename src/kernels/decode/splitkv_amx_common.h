/* What the AMX decode driver (splitkv_amx_driver.inc) and its kernels
 * (decode_splitkv_amx__*.c) share around their passes: the scratch's
 * 64-byte pieces, one tile configuration at a time, a thread's share of a
 * tile's chunks, a block's scores finished, a slot's softmax over the
 * whole split at once (its max is known before any weight: no rescaling),
 * and the slot's partial state written at the end. Include in a TU built
 * with AVX-512 and AMX-TILE flags. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_COMMON_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_COMMON_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/splitkv_common.h"
#include "runtime/runtime.h"
#include "simd/simd_avx512.h"

/* bytes rounded up to whole cache lines. */
static inline size_t fc_amx_up64(size_t bytes) {
  return (bytes + 63) & ~(size_t)63;
}

/* A thread's piece of a team scratch of rank_bytes a rank (64 bytes more
 * than its arrays, for the alignment), its start on a cache line. */
static inline char *fc_amx_rank_scratch(const fc_team_view *team,
                                        size_t rank_bytes) {
  const uintptr_t at =
      (uintptr_t)team->scratch + (uintptr_t)team->rank * rank_bytes;
  return (char *)((at + 63) & ~(uintptr_t)63);
}

/* *field = the next array of `bytes` from the cursor at, which moves on
 * by whole cache lines. */
#define FC_AMX_TAKE(at, field, type, bytes)                                    \
  do {                                                                         \
    (field) = (type *)(at);                                                    \
    (at) += fc_amx_up64(bytes);                                                \
  } while (0)

/* Loads palette 1 with rows[t] rows of bytes[t] bytes for tiles 0..7. */
static inline void fc_amx_load_config(const unsigned char rows[8],
                                      const unsigned short bytes[8]) {
  struct {
    unsigned char palette, start_row, reserved[14];
    unsigned short bytes_per_row[16];
    unsigned char rows[16];
  } c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; t++) {
    c.rows[t] = rows[t];
    c.bytes_per_row[t] = bytes[t];
  }
  _tile_loadconfig(&c);
}

/* The bf16 decode kernels' score shapes: every tile 16 rows of 64 bytes
 * (0/1 the sums of even/odd blocks, 2..5 K's steps, 6/7 q's planes). */
static inline void fc_amx_configure_bf16_scores(void) {
  static const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  static const unsigned short bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* The bf16 decode kernels' value shapes: tiles 0..5 (outputs and weights)
 * out_rows rows, 6/7 (V) 16, every row 64 bytes. */
static inline void fc_amx_configure_bf16_values(unsigned char out_rows) {
  const unsigned char rows[8] = {out_rows, out_rows, out_rows, out_rows,
                                 out_rows, out_rows, 16,       16};
  static const unsigned short bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* How many of a tile's chunks thread `rank` of `size` computes: chunks
 * rank, rank + size, ... of the (slots + FC_SPLITKV_CHUNK - 1) /
 * FC_SPLITKV_CHUNK. */
static inline int64_t fc_amx_chunks_of_rank(int64_t slots, int rank, int size) {
  const int64_t chunks = (slots + FC_SPLITKV_CHUNK - 1) / FC_SPLITKV_CHUNK;
  return rank < chunks ? (chunks - rank + size - 1) / size : 0;
}

/* The (kv head, chunk) units of this thread in tile t, head-major: head
 * h's `mine` chunks (fc_amx_chunks_of_rank) at h * mine .., with the
 * slots that lie in the batch marked valid; count grows by heads x mine.
 * A macro: each kernel has its own unit type, with the fields kv_head,
 * chunk and valid[FC_SPLITKV_CHUNK]. */
#define FC_AMX_UNITS_OF_TILE(units, count, t, team, heads, mine)               \
  do {                                                                         \
    for (int64_t h_ = 0; h_ < (heads); h_++)                                   \
      for (int64_t i_ = 0; i_ < (mine); i_++) {                                \
        (units)[(count)].kv_head = (t).h0 + h_;                                \
        (units)[(count)].chunk = (team)->rank + i_ * (team)->size;             \
        for (int s_ = 0; s_ < FC_SPLITKV_CHUNK; s_++)                          \
          (units)[(count)].valid[s_] =                                         \
              (units)[(count)].chunk * FC_SPLITKV_CHUNK + s_ < (t).slots;      \
        (count)++;                                                             \
      }                                                                        \
  } while (0)

/* A unit's scores of a block, p[slot][key - begin] for slots chunk *
 * FC_SPLITKV_CHUNK .. (slots keys floats apart), finished (masks,
 * softcap) where the problem needs it. */
static inline void fc_amx_finish_scores(const fc_splitkv_shared *shared,
                                        float *p, int64_t keys,
                                        const fc_splitkv_tile *t,
                                        int64_t kv_head, int64_t chunk,
                                        int64_t j0, int64_t n) {
  if (shared->needs_finish)
    for (int s = 0; s < FC_SPLITKV_CHUNK; s++)
      fc_splitkv_finish(shared, p + s * keys, t->b, kv_head,
                        chunk * FC_SPLITKV_CHUNK + s, j0, n, t->kv_length);
}

/* A slot's split: the max m and sum l of its scores p[0 .. 16 blocks), p
 * turned into weights (0 where the slot does not see the key) and seen[i]
 * the bits of block i's keys it sees. nan: some score is NaN (m and l
 * are not set further); active: the slot sees a key. */
static inline void fc_amx_slot_softmax(float *p, uint16_t *seen, int64_t blocks,
                                       float *m, float *l, bool *nan,
                                       bool *active) {
  *m = -INFINITY;
  *l = 0.0f;
  *nan = false;
  *active = false;
  __m512 top = _mm512_set1_ps(-INFINITY);
  __mmask16 unordered = 0;
  for (int64_t i = 0; i < blocks; i++) {
    const __m512 x = _mm512_loadu_ps(p + FC_SPLITKV_KEY_BLOCK * i);
    unordered |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    top = _mm512_max_ps(top, x);
  }
  if (unordered) {
    *nan = true;
    return;
  }
  const float largest = _mm512_reduce_max_ps(top);
  *m = largest;
  if (largest == -INFINITY) return;
  *active = true;
  const __m512 shift = _mm512_set1_ps(largest);
  __m512 total = _mm512_setzero_ps();
  for (int64_t i = 0; i < blocks; i++) {
    const __m512 x = _mm512_loadu_ps(p + FC_SPLITKV_KEY_BLOCK * i);
    const __mmask16 sees =
        _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    const __m512 w =
        _mm512_maskz_mov_ps(sees, fc512_exp2(_mm512_sub_ps(x, shift)));
    _mm512_storeu_ps(p + FC_SPLITKV_KEY_BLOCK * i, w);
    total = _mm512_add_ps(total, w);
    seen[i] = sees;
  }
  *l = _mm512_reduce_add_ps(total);
}

/* A slot's partial state into its record: empty where the tile had no
 * work for it or it sees no key, NaN throughout where it saw a NaN score
 * (o is overwritten), else m, l and o[0..dim). */
static inline void fc_amx_slot_write(float *record, bool work, bool nan,
                                     float m, float l, float *o, int64_t dim) {
  if (!work || (!nan && m == -INFINITY)) {
    fc_splitkv_write_state(record, -INFINITY, 0.0f, NULL, dim, 0);
  } else if (nan) {
    for (int64_t d = 0; d < dim; d++) o[d] = NAN;
    fc_splitkv_write_state(record, NAN, NAN, o, dim, 0);
  } else {
    fc_splitkv_write_state(record, m, l, o, dim, 0);
  }
}

/* One 16-key block's bf16 products for a pack into sum tile c: K's steps
 * (tiles 2..5) times q's planes (B tiles of `plane` elements, through
 * tiles 6 and 7), stored at sums in 64-byte rows. c is a constant: the
 * tile instructions take their tile numbers as immediates. */
#define FC_AMX_SCORE_TILES(c, planes, plane, steps, sums)                      \
  do {                                                                         \
    _tile_zero(c);                                                             \
    _tile_loadd(6, (planes), 64);                                              \
    _tile_dpbf16ps(c, 2, 6);                                                   \
    if ((steps) > 1) {                                                         \
      _tile_loadd(7, (planes) + (plane), 64);                                  \
      _tile_dpbf16ps(c, 3, 7);                                                 \
    }                                                                          \
    if ((steps) > 2) {                                                         \
      _tile_loadd(6, (planes) + 2 * (plane), 64);                              \
      _tile_dpbf16ps(c, 4, 6);                                                 \
    }                                                                          \
    if ((steps) > 3) {                                                         \
      _tile_loadd(7, (planes) + 3 * (plane), 64);                              \
      _tile_dpbf16ps(c, 5, 7);                                                 \
    }                                                                          \
    _tile_stored(c, (sums), 64);                                               \
  } while (0)

#endif
