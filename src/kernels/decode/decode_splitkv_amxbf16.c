/* Split-KV decode of bf16 q, K and V on AMX-BF16 tiles, for CPUs that have
 * them (head_dim = v_head_dim, a multiple of 32 up to 128).
 *
 * The vector kernels' products grow with the query rows a kv head has
 * while the bytes do not; here the tiles do them, the rows are read as
 * they lie, with nothing interleaved, and each block's K and V tiles
 * serve every chunk of the head: faster where a head has two chunks or
 * more (a verify step), no faster with one, where moving the lines binds
 * (docs/performance.md). A tile's split goes in three
 * passes like the AMX-INT8 kernel's, each over the keys in address order
 * with every kv head of the tile per block:
 *   1. scores: a 16-key block of a head's K rows is the A operand, one
 *      tile per 32 elements, shared by the head's chunks of 4 slots; the
 *      q of up to 4 chunks of the head, made once, is the B operand (16
 *      element pairs x 16 slots); S^T = K q^T per block, times q_factor;
 *   2. softmax over the whole split at once (splitkv_amx_common.h);
 *   3. values: V's rows are B tiles as they lie, each 32-element row read
 *      as 16 pairs. A weights tile whose row s holds (w_j, 0) per key j
 *      and row 4 + s holds (0, w_j) takes, in one product, slot s's even
 *      columns into row s and its odd ones into row 4 + s of an output
 *      tile per 32 columns; the weights are rounded to bf16, as the AMX
 *      prefill kernel rounds P.
 * The zero halves meet V's neighbouring columns: a NaN or infinite V (or a
 * NaN under a zero weight) would leak into a column it does not belong to,
 * so a unit whose outputs are not all finite is computed again in f32
 * from its weights, where only the keys a slot sees count. Splits, states
 * and merge are the shared split-KV ones (splitkv_common.c). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype_convert.h"
#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_amx_common.h"
#include "kernels/decode/splitkv_amx_rows.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/kernel_support.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
  CHUNK = FC_SPLITKV_CHUNK,
  BLOCK = FC_SPLITKV_KEY_BLOCK,
  GROUP = 64, /* keys per values step: the outputs stay in tiles over it */
  STEP = 32,  /* elements per tile row (64 bytes) */
  PACK = 4,   /* chunks whose scores share one product */
  COLUMNS = PACK * CHUNK,   /* slots of a scores tile */
  PLANE = 16 * COLUMNS * 2, /* q's B tile of a step: 16 pairs x 16 slots */
  OUT_ROWS = 2 * CHUNK      /* even and odd columns of 4 slots */
};
_Static_assert(CHUNK == 4 && BLOCK == 16, "tile shapes assume 4 x 16");

typedef struct amx_args {
  fc_splitkv_shared shared;
  const fc_problem *p;
  int64_t chunks; /* per kv head, of the largest batch */
  int64_t dim;    /* head_dim = v_head_dim */
  int64_t steps;  /* dim / STEP */
  int64_t keys;   /* split keys, up to a whole group */
} amx_args;

/* A (kv head, chunk) of a tile that a thread computes. */
typedef struct amx_unit {
  int64_t kv_head, chunk;
  float m[CHUNK], l[CHUNK];
  bool valid[CHUNK], nan[CHUNK], active[CHUNK];
} amx_unit;

/* One thread's arrays in the team scratch, each 64-byte aligned; per unit
 * u: o at u * CHUNK * dim ([step][OUT_ROWS][16]: slot s's even columns of
 * the step in row s, odd ones in row CHUNK + s), p at u * CHUNK * keys,
 * seen at u * CHUNK * keys / BLOCK; the planes of a head's pack p of
 * PACK units (its chunks PACK p ..) at (h * packs + p) * steps * PLANE. */
typedef struct amx_thread {
  amx_unit *units;
  int64_t count; /* units: heads per tile x chunks of this thread */
  float *o, *p;
  uint16_t *seen;
  uint16_t *planes;
  uint16_t *k_pack;  /* [BLOCK][dim]: a block whose rows are not spaced */
  uint16_t *v_pack;  /* [GROUP][dim] */
  uint32_t *weights; /* [GROUP / BLOCK][OUT_ROWS][BLOCK] bf16 pairs */
  float *score_sums; /* [2][BLOCK][COLUMNS] */
  float *natural;    /* [dim]: a slot's o in column order */
} amx_thread;

static int64_t units_of_rank(const amx_args *a, int team_size) {
  return (a->chunks + team_size - 1) / team_size * a->shared.heads_per_tile;
}

/* Packs of PACK units per head, for a thread with `per_head` units a head. */
static int64_t packs_of(int64_t per_head) {
  return (per_head + PACK - 1) / PACK;
}

static size_t plane_bytes(const amx_args *a, int team_size) {
  return (size_t)(a->shared.heads_per_tile *
                  packs_of((a->chunks + team_size - 1) / team_size) * a->steps *
                  PLANE) *
         sizeof(uint16_t);
}

static size_t rank_bytes(const amx_args *a, int team_size) {
  const size_t dim = (size_t)a->dim, keys = (size_t)a->keys;
  const size_t units = (size_t)units_of_rank(a, team_size);
  return fc_amx_up64(units * sizeof(amx_unit)) +
         fc_amx_up64(units * CHUNK * dim * sizeof(float)) +
         fc_amx_up64(units * CHUNK * keys * sizeof(float)) +
         fc_amx_up64(units * CHUNK * keys / BLOCK * sizeof(uint16_t)) +
         fc_amx_up64(plane_bytes(a, team_size)) +
         fc_amx_up64(BLOCK * dim * sizeof(uint16_t)) +
         fc_amx_up64(GROUP * dim * sizeof(uint16_t)) +
         fc_amx_up64(GROUP / BLOCK * OUT_ROWS * BLOCK * sizeof(uint32_t)) +
         fc_amx_up64(2 * BLOCK * COLUMNS * sizeof(float)) +
         fc_amx_up64(dim * sizeof(float)) + 64;
}

static size_t scratch_for_team(const void *opaque, int team_size) {
  return (size_t)team_size * rank_bytes(opaque, team_size);
}

static amx_thread carve(const amx_args *a, const fc_team_view *team) {
  char *at = fc_amx_rank_scratch(team, rank_bytes(a, team->size));
  const size_t dim = (size_t)a->dim, keys = (size_t)a->keys;
  const size_t units = (size_t)units_of_rank(a, team->size);
  amx_thread th;
#define TAKE(field, type, bytes) FC_AMX_TAKE(at, th.field, type, bytes)
  TAKE(units, amx_unit, units * sizeof(amx_unit));
  TAKE(o, float, units *CHUNK *dim * sizeof(float));
  TAKE(p, float, units *CHUNK *keys * sizeof(float));
  TAKE(seen, uint16_t, units * CHUNK * keys / BLOCK * sizeof(uint16_t));
  TAKE(planes, uint16_t, plane_bytes(a, team->size));
  TAKE(k_pack, uint16_t, BLOCK * dim * sizeof(uint16_t));
  TAKE(v_pack, uint16_t, GROUP * dim * sizeof(uint16_t));
  TAKE(weights, uint32_t, GROUP / BLOCK * OUT_ROWS * BLOCK * sizeof(uint32_t));
  TAKE(score_sums, float, 2 * BLOCK * COLUMNS * sizeof(float));
  TAKE(natural, float, dim * sizeof(float));
#undef TAKE
  th.count = 0;
  return th;
}

/* Scores: 0/1 the sums of even/odd products (16 keys x 16 slots); 2..5
 * K's steps (16 keys x 32 elements); 6/7 q's planes of even/odd steps (16
 * pairs x 16 slots). */
static void configure_scores(void) {
  static const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  static const unsigned short bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* Values: 0..3 the outputs of the steps (8 rows x 16 columns); 4/5 the
 * weights of even/odd blocks (8 rows x 16 key pairs); 6/7 V's even/odd
 * steps (16 keys x 32 elements). */
static void configure_values(void) {
  static const unsigned char rows[8] = {OUT_ROWS, OUT_ROWS, OUT_ROWS, OUT_ROWS,
                                        OUT_ROWS, OUT_ROWS, 16,       16};
  static const unsigned short bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* The unit's q into its pack's B tiles at column `column` (of PACK):
 * plane[step][r][CHUNK column + s] is slot s's elements 32 step + 2 r and
 * + 1 (zeros for a slot past the batch's). */
static void make_planes(const amx_args *a, const amx_thread *th,
                        const fc_splitkv_tile *t, int64_t u, uint16_t *planes,
                        int column) {
  const fc_problem *p = a->p;
  const amx_unit *unit = &th->units[u];
  uint32_t *plane = (uint32_t *)planes + column * CHUNK;
  for (int s = 0; s < CHUNK; s++) {
    const int64_t slot = unit->chunk * CHUNK + s;
    const char *q =
        unit->valid[s] ? fc_view_row(&p->q, t->b, slot / p->group,
                                     unit->kv_head * p->group + slot % p->group)
                       : NULL;
    for (int64_t pair = 0; pair < a->dim / 2; pair++) {
      uint32_t two = 0;
      if (q) memcpy(&two, q + 4 * pair, sizeof two);
      plane[pair * COLUMNS + s] = two;
    }
  }
}

/* One block's products for a pack into sum tile c: K's steps (tiles 2..5)
 * times q's planes, stored at sums. */
#define SCORE_TILES(c)                                                         \
  do {                                                                         \
    _tile_zero(c);                                                             \
    _tile_loadd(6, planes, 64);                                                \
    _tile_dpbf16ps(c, 2, 6);                                                   \
    if (steps > 1) {                                                           \
      _tile_loadd(7, planes + PLANE, 64);                                      \
      _tile_dpbf16ps(c, 3, 7);                                                 \
    }                                                                          \
    if (steps > 2) {                                                           \
      _tile_loadd(6, planes + 2 * PLANE, 64);                                  \
      _tile_dpbf16ps(c, 4, 6);                                                 \
    }                                                                          \
    if (steps > 3) {                                                           \
      _tile_loadd(7, planes + 3 * PLANE, 64);                                  \
      _tile_dpbf16ps(c, 5, 7);                                                 \
    }                                                                          \
    _tile_stored(c, sums, 64);                                                 \
  } while (0)

/* A unit's scores of a block from its pack's sums ([key][COLUMNS], the
 * unit's 4 slots at CHUNK column): p[s][key - begin] times q_factor
 * (lanes past n -inf), finished where the problem needs it. */
static ALWAYS_INLINE void
finish_block_scores(const amx_args *a, const amx_thread *th,
                    const fc_splitkv_tile *t, int64_t u, const float *sums,
                    int column, int64_t j0, int64_t n) {
  const __m512i by_slot =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 grouped[BLOCK / 4], slot[CHUNK];
  const float *at = sums + CHUNK * column;
  for (int g = 0; g < BLOCK / 4; g++) {
    /* Keys 4 g .. 4 g + 3, the unit's 4 slots each: lane 4 key + slot. */
    const float *row = at + 4 * g * COLUMNS;
    __m512 keys = _mm512_castps128_ps512(_mm_load_ps(row));
    keys = _mm512_insertf32x4(keys, _mm_load_ps(row + COLUMNS), 1);
    keys = _mm512_insertf32x4(keys, _mm_load_ps(row + 2 * COLUMNS), 2);
    keys = _mm512_insertf32x4(keys, _mm_load_ps(row + 3 * COLUMNS), 3);
    grouped[g] = _mm512_permutexvar_ps(by_slot, keys);
  }
  fc512_transpose_128x4(grouped, slot);
  const __mmask16 lanes = fc512_tail_mask(n);
  const __m512 factor = _mm512_set1_ps(a->shared.q_factor);
  float *p = th->p + u * CHUNK * a->keys + (j0 - t->begin);
  for (int s = 0; s < CHUNK; s++)
    _mm512_storeu_ps(
        p + s * a->keys,
        _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), lanes,
                           fc512_saturate(_mm512_mul_ps(slot[s], factor))));
  if (a->shared.needs_finish)
    for (int s = 0; s < CHUNK; s++)
      fc_splitkv_finish(&a->shared, p + s * a->keys, t->b, th->units[u].kv_head,
                        th->units[u].chunk * CHUNK + s, j0, n, t->kv_length);
}

/* A block's rows as one strided run: where they lie when evenly spaced,
 * else copied into pack (rows past the split repeat its last). */
static ALWAYS_INLINE const char *block_run(const key_block *block,
                                           int64_t row_bytes, int64_t rows,
                                           uint16_t *pack, long *stride) {
  if (block->spaced) {
    *stride = (long)block->stride;
    return block->base;
  }
  for (int j = 0; j < rows; j++)
    memcpy((char *)pack + j * row_bytes, row_of(block, j), (size_t)row_bytes);
  *stride = (long)row_bytes;
  return (const char *)pack;
}

/* Pass 1: every unit's scores, block by block, each block's heads in
 * turn. */
static void scores_pass(const amx_args *a, const amx_thread *th,
                        const fc_splitkv_tile *t) {
  const fc_problem *p = a->p;
  const int64_t steps = a->steps, row_bytes = 2 * a->dim;
  const int64_t per_head = th->count / a->shared.heads_per_tile;
  const int64_t packs = packs_of(per_head);
  fc_prefetch_sweep first_block =
      sweep_keys(&a->shared, &p->k, t, t->begin, BLOCK, row_bytes);
  fc_sweep_all(&first_block);
  int parity = 0;
  for (int64_t j0 = t->begin; j0 < t->end; j0 += BLOCK) {
    const int64_t n = t->end - j0 < BLOCK ? t->end - j0 : BLOCK;
    fc_prefetch_sweep sweep =
        sweep_keys(&a->shared, &p->k, t, j0 + BLOCK, BLOCK, row_bytes);
    const int64_t half_lines = n * (row_bytes / 64) / 2;
    for (int64_t h = 0; h < a->shared.heads_per_tile; h++) {
      const int64_t first = h * per_head;
      const row_walk walk = walk_rows(&p->k, t, th->units[first].kv_head);
      key_block block;
      block_at(&a->shared, &walk, t, j0, true, &block);
      sweep_lines(&sweep, half_lines);
      long stride;
      const char *rows =
          block_run(&block, row_bytes, BLOCK, th->k_pack, &stride);
      _tile_loadd(2, rows, stride);
      if (steps > 1) _tile_loadd(3, rows + 64, stride);
      if (steps > 2) _tile_loadd(4, rows + 128, stride);
      if (steps > 3) _tile_loadd(5, rows + 192, stride);
      for (int64_t pack = 0; pack < packs; pack++) {
        const uint16_t *planes =
            th->planes + (h * packs + pack) * steps * PLANE;
        float *sums = th->score_sums + parity * BLOCK * COLUMNS;
        if (parity)
          SCORE_TILES(1);
        else
          SCORE_TILES(0);
        parity ^= 1;
        const int64_t u0 = first + pack * PACK;
        for (int64_t u = u0; u < first + per_head && u < u0 + PACK; u++)
          finish_block_scores(a, th, t, u, sums, (int)(u - u0), j0, n);
      }
      sweep_lines(&sweep, half_lines);
    }
  }
}

/* The unit's weights of the group's blocks as A tiles: block i's row s
 * holds (w, 0) and row CHUNK + s (0, w) per key, w rounded to bf16 (0
 * where the slot does not see the key or the block is past the split). */
static void group_weights(const amx_args *a, const amx_thread *th,
                          const fc_splitkv_tile *t, int64_t u, int64_t g0) {
  const amx_unit *unit = &th->units[u];
  for (int i = 0; i < GROUP / BLOCK; i++) {
    uint32_t *tile = th->weights + i * OUT_ROWS * BLOCK;
    const int64_t at = g0 + BLOCK * i - t->begin;
    for (int s = 0; s < CHUNK; s++) {
      __m512 w = _mm512_setzero_ps();
      if (unit->active[s] && g0 + BLOCK * i < t->end)
        w = _mm512_maskz_loadu_ps(
            th->seen[(u * CHUNK + s) * (a->keys / BLOCK) + at / BLOCK],
            th->p + (u * CHUNK + s) * a->keys + at);
      const __m512i wide =
          _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(w));
      _mm512_store_si512(tile + s * BLOCK, wide);
      _mm512_store_si512(tile + (CHUNK + s) * BLOCK,
                         _mm512_slli_epi32(wide, 16));
    }
  }
}

/* One block's products for a unit: weights tile w, V's steps loaded at
 * rows into the even/odd V tiles, into the output tiles 0..3. */
#define VALUE_TILES(w, rows, stride)                                           \
  do {                                                                         \
    _tile_loadd(w, th->weights + i * OUT_ROWS * BLOCK, 64);                    \
    _tile_loadd(6, rows, stride);                                              \
    _tile_dpbf16ps(0, w, 6);                                                   \
    if (steps > 1) {                                                           \
      _tile_loadd(7, (rows) + 64, stride);                                     \
      _tile_dpbf16ps(1, w, 7);                                                 \
    }                                                                          \
    if (steps > 2) {                                                           \
      _tile_loadd(6, (rows) + 128, stride);                                    \
      _tile_dpbf16ps(2, w, 6);                                                 \
    }                                                                          \
    if (steps > 3) {                                                           \
      _tile_loadd(7, (rows) + 192, stride);                                    \
      _tile_dpbf16ps(3, w, 7);                                                 \
    }                                                                          \
  } while (0)

#define OUTPUT_TILES(op, o)                                                    \
  do {                                                                         \
    op(0, (o), 64);                                                            \
    if (steps > 1) op(1, (o) + OUT_ROWS * 16, 64);                             \
    if (steps > 2) op(2, (o) + 2 * OUT_ROWS * 16, 64);                         \
    if (steps > 3) op(3, (o) + 3 * OUT_ROWS * 16, 64);                         \
  } while (0)

/* Pass 3: every unit's o, group by group, each group's heads in turn. */
static void values_pass(const amx_args *a, const amx_thread *th,
                        const fc_splitkv_tile *t) {
  const fc_problem *p = a->p;
  const int64_t steps = a->steps, row_bytes = 2 * a->dim;
  const int64_t per_head = th->count / a->shared.heads_per_tile;
  const int64_t block_lines = BLOCK * row_bytes / 64;
  for (int64_t g0 = t->begin; g0 < t->end; g0 += GROUP) {
    fc_prefetch_sweep sweep =
        sweep_keys(&a->shared, &p->v, t, g0 + GROUP, GROUP, row_bytes);
    const int blocks =
        (int)((t->end - g0 < GROUP ? t->end - g0 : GROUP) + BLOCK - 1) / BLOCK;
    for (int64_t h = 0; h < a->shared.heads_per_tile; h++) {
      const int64_t first = h * per_head;
      bool wanted = false;
      for (int64_t u = first; u < first + per_head; u++)
        for (int s = 0; s < CHUNK; s++)
          wanted = wanted || th->units[u].active[s];
      if (!wanted) {
        sweep_lines(&sweep, blocks * block_lines);
        continue;
      }
      const row_walk walk = walk_rows(&p->v, t, th->units[first].kv_head);
      const char *rows[GROUP / BLOCK];
      long strides[GROUP / BLOCK];
      for (int i = 0; i < blocks; i++) {
        key_block block;
        block_at(&a->shared, &walk, t, g0 + BLOCK * i, false, &block);
        rows[i] = block_run(&block, row_bytes, BLOCK,
                            th->v_pack + i * BLOCK * a->dim, &strides[i]);
      }
      for (int64_t u = first; u < first + per_head; u++) {
        bool active = false;
        for (int s = 0; s < CHUNK; s++)
          active = active || th->units[u].active[s];
        if (!active) continue;
        group_weights(a, th, t, u, g0);
        float *o = th->o + u * CHUNK * a->dim;
        OUTPUT_TILES(_tile_loadd, o);
        for (int i = 0; i < blocks; i++) {
          if (i % 2)
            VALUE_TILES(5, rows[i], strides[i]);
          else
            VALUE_TILES(4, rows[i], strides[i]);
          sweep_lines(&sweep, block_lines / per_head);
        }
        OUTPUT_TILES(_tile_stored, o);
      }
    }
  }
}

/* Where column d of slot s lies in a unit's o. */
static int64_t out_index(int s, int64_t d) {
  const int64_t r = d % STEP;
  return (d / STEP * OUT_ROWS + (r % 2) * CHUNK + s) * 16 + r / 2;
}

/* A unit's o in f32 over the whole split, only the keys each slot sees
 * counting (its tile outputs were not all finite). */
static void values_in_f32(const amx_args *a, const amx_thread *th,
                          const fc_splitkv_tile *t, int64_t u) {
  const amx_unit *unit = &th->units[u];
  const int64_t dim = a->dim;
  const row_walk walk = walk_rows(&a->p->v, t, unit->kv_head);
  float *o = th->o + u * CHUNK * dim;
  memset(o, 0, (size_t)(CHUNK * dim) * sizeof(float));
  for (int64_t j0 = t->begin; j0 < t->end; j0 += BLOCK) {
    const int64_t n = t->end - j0 < BLOCK ? t->end - j0 : BLOCK;
    key_block block;
    block_at(&a->shared, &walk, t, j0, false, &block);
    const int64_t at = j0 - t->begin;
    for (int s = 0; s < CHUNK; s++) {
      if (!unit->active[s]) continue;
      const unsigned sees =
          th->seen[(u * CHUNK + s) * (a->keys / BLOCK) + at / BLOCK];
      for (int64_t j = 0; j < n; j++) {
        if (!((sees >> j) & 1u)) continue;
        const float weight = th->p[(u * CHUNK + s) * a->keys + at + j];
        const uint16_t *row = (const uint16_t *)row_of(&block, (int)j);
        for (int64_t d = 0; d < dim; d++)
          o[out_index(s, d)] += weight * fc_bf16_to_f32(row[d]);
      }
    }
  }
}

/* Whether every output of a unit is finite. */
static bool outputs_finite(const amx_args *a, const amx_thread *th, int64_t u) {
  const float *o = th->o + u * CHUNK * a->dim;
  __mmask16 bad = 0;
  for (int64_t i = 0; i < CHUNK * a->dim; i += 16)
    bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_load_ps(o + i)),
                              _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
  return bad == 0;
}

/* Writes a unit's partial states, o back in column order; returns how
 * many. */
static int write_unit(const amx_args *a, const amx_thread *th,
                      const fc_splitkv_tile *t, int64_t u, bool work) {
  const amx_unit *unit = &th->units[u];
  const __m512i first_half =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second_half =
      _mm512_add_epi32(first_half, _mm512_set1_epi32(8));
  const float *o = th->o + u * CHUNK * a->dim;
  int written = 0;
  for (int s = 0; s < CHUNK; s++) {
    if (!unit->valid[s]) continue;
    written++;
    /* Without work the unit's state was never set: the slot gets an empty
     * state, and nothing of it is read. */
    for (int64_t step = 0; work && step < a->steps; step++) {
      const __m512 even = _mm512_load_ps(o + (step * OUT_ROWS + s) * 16);
      const __m512 odd = _mm512_load_ps(o + (step * OUT_ROWS + CHUNK + s) * 16);
      _mm512_storeu_ps(th->natural + step * STEP,
                       _mm512_permutex2var_ps(even, first_half, odd));
      _mm512_storeu_ps(th->natural + step * STEP + 16,
                       _mm512_permutex2var_ps(even, second_half, odd));
    }
    fc_amx_slot_write(fc_splitkv_record(&a->shared, t->b, unit->kv_head,
                                        t->split, unit->chunk * CHUNK + s),
                      work, work && unit->nan[s], work ? unit->m[s] : -INFINITY,
                      work ? unit->l[s] : 0.0f, th->natural, a->dim);
  }
  return written;
}

static void tile(void *opaque, int64_t index, const fc_team_view *team) {
  const amx_args *a = opaque;
  const fc_splitkv_tile t = fc_splitkv_locate(&a->shared, index);
  amx_thread th = carve(a, team);
  const int64_t mine = fc_amx_chunks_of_rank(t.slots, team->rank, team->size);
  FC_AMX_UNITS_OF_TILE(th.units, th.count, t, team, a->shared.heads_per_tile,
                       mine);
  const bool work = t.begin < t.end && th.count > 0;
  if (work) {
    /* Units head-major, so a head's pack p holds its units PACK p .. */
    const int64_t packs = packs_of(mine);
    memset(th.planes, 0,
           (size_t)(a->shared.heads_per_tile * packs * a->steps * PLANE) *
               sizeof(uint16_t));
    for (int64_t u = 0; u < th.count; u++) {
      const int64_t h = u / mine, i = u % mine;
      make_planes(a, &th, &t, u,
                  th.planes + (h * packs + i / PACK) * a->steps * PLANE,
                  (int)(i % PACK));
    }
    configure_scores();
    scores_pass(a, &th, &t);
    fc_prefetch_sweep first_group =
        sweep_keys(&a->shared, &a->p->v, &t, t.begin, GROUP, 2 * a->dim);
    fc_sweep_all(&first_group);
    for (int64_t u = 0; u < th.count; u++) {
      amx_unit *unit = &th.units[u];
      for (int s = 0; s < CHUNK; s++) {
        unit->m[s] = -INFINITY;
        unit->l[s] = 0.0f;
        unit->nan[s] = unit->active[s] = false;
        if (unit->valid[s])
          fc_amx_slot_softmax(th.p + (u * CHUNK + s) * a->keys,
                              th.seen + (u * CHUNK + s) * (a->keys / BLOCK),
                              (t.end - t.begin + BLOCK - 1) / BLOCK,
                              &unit->m[s], &unit->l[s], &unit->nan[s],
                              &unit->active[s]);
      }
      memset(th.o + u * CHUNK * a->dim, 0,
             (size_t)(CHUNK * a->dim) * sizeof(float));
    }
    configure_values();
    values_pass(a, &th, &t);
    _tile_release();
    for (int64_t u = 0; u < th.count; u++)
      if (!outputs_finite(a, &th, u)) values_in_f32(a, &th, &t, u);
  }
  int written = 0;
  for (int64_t u = 0; u < th.count; u++)
    written += write_unit(a, &th, &t, u, work);
  fc_splitkv_tile_written(&a->shared, &t, written);
}

/* The registry row. */
flashcpu_status fc_decode_splitkv_amx__amxbf16(const fc_kernel_env *env,
                                               const fc_problem *p,
                                               fc_kernel_plan *plan) {
  amx_args a;
  memset(&a, 0, sizeof a);
  fc_splitkv_shared_init(&a.shared, p, env->settings);
  a.p = p;
  a.chunks = (a.shared.plan.slots + CHUNK - 1) / CHUNK;
  a.dim = p->head_dim;
  a.steps = p->head_dim / STEP;
  a.keys = (a.shared.plan.split_keys + GROUP - 1) / GROUP * GROUP;
  return fc_splitkv_plan_args(env, plan, &a, sizeof a, tile, scratch_for_team);
}
