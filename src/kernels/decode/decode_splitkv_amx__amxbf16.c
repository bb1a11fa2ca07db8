/* Split-KV decode of bf16 q, K and V on AMX-BF16 tiles, for CPUs that have
 * them (head_dim = v_head_dim, a multiple of 32 up to 128): the tile
 * products of the AMX decode driver (splitkv_amx_driver.inc).
 *
 * The vector kernels' products grow with the query rows a kv head has
 * while the bytes do not; here the tiles do them, the rows are read as
 * they lie, with nothing interleaved, and each block's K and V tiles
 * serve every chunk of the head: faster where a head has two chunks or
 * more (a verify step), no faster with one, where moving the lines binds
 * (docs/performance.md).
 *   scores: a 16-key block of a head's K rows is the A operand, one tile
 *      per 32 elements, shared by the head's chunks of 4 slots; the q of
 *      up to 4 chunks of the head, made once, is the B operand (16 element
 *      pairs x 16 slots); S^T = K q^T per block, times q_factor;
 *   values: V's rows are B tiles as they lie, each 32-element row read as
 *      16 pairs. A weights tile whose row s holds (w_j, 0) per key j and
 *      row 4 + s holds (0, w_j) takes, in one product, slot s's even
 *      columns into row s and its odd ones into row 4 + s of an output
 *      tile per 32 columns; the weights are rounded to bf16, as the AMX
 *      prefill kernel rounds P.
 * The zero halves meet V's neighbouring columns: a NaN or infinite V (or a
 * NaN under a zero weight) would leak into a column it does not belong to,
 * so a unit whose outputs are not all finite does not stand, and the
 * driver computes it again in f32. */
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

#define AMX_ELEMENT_BYTES 2
/* A skipped head's lines are swept as if read: the sweep keeps its pace. */
#define AMX_SWEEPS_SKIPPED_HEADS 1

typedef struct amx_args {
  fc_splitkv_shared shared;
  const fc_problem *p;
  int64_t chunks; /* per kv head, of the largest batch */
  int64_t dim;    /* head_dim = v_head_dim */
  int64_t steps;  /* dim / STEP */
  int64_t keys;   /* split keys, up to a whole group */
} amx_args;

typedef struct amx_unit {
  int64_t kv_head, chunk;
  float m[CHUNK], l[CHUNK];
  bool valid[CHUNK], nan[CHUNK], active[CHUNK];
} amx_unit;

typedef struct amx_shape {
  int64_t steps;
} amx_shape;

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

/* Per unit u: o at u * CHUNK * dim ([step][OUT_ROWS][16]: slot s's even
 * columns of the step in row s, odd ones in row CHUNK + s); the planes of
 * a head's pack p of PACK units (its chunks PACK p ..) at (h * packs + p)
 * * steps * PLANE. */
#define AMX_ARRAYS(X)                                                          \
  X(units, amx_unit, units * sizeof(amx_unit))                                 \
  X(o, float, units *CHUNK *dim * sizeof(float))                               \
  X(p, float, units *CHUNK *keys * sizeof(float))                              \
  X(seen, uint16_t, units *CHUNK *keys / BLOCK * sizeof(uint16_t))             \
  X(planes, uint16_t, plane_bytes(a, team_size))                               \
  X(k_pack, uint16_t, BLOCK *dim * sizeof(uint16_t))                           \
  X(v_pack, uint16_t, GROUP *dim * sizeof(uint16_t))                           \
  /* [GROUP / BLOCK][OUT_ROWS][BLOCK] bf16 pairs */                            \
  X(weights, uint32_t, GROUP / BLOCK * OUT_ROWS * BLOCK * sizeof(uint32_t))    \
  X(score_sums, float, 2 * BLOCK * COLUMNS * sizeof(float))                    \
  /* a slot's o in column order */                                             \
  X(natural, float, dim * sizeof(float))

#include "kernels/decode/splitkv_amx_driver.inc"

static amx_shape amx_shape_of(const amx_args *a) {
  const amx_shape shape = {a->steps};
  return shape;
}

/* Scores: 0/1 the sums of even/odd products (16 keys x 16 slots); 2..5
 * K's steps (16 keys x 32 elements); 6/7 q's planes of even/odd steps (16
 * pairs x 16 slots). */
static void configure_scores(void) { fc_amx_configure_bf16_scores(); }

/* Values: 0..3 the outputs of the steps (8 rows x 16 columns); 4/5 the
 * weights of even/odd blocks (8 rows x 16 key pairs); 6/7 V's even/odd
 * steps (16 keys x 32 elements). */
static void amx_configure_values(void) {
  fc_amx_configure_bf16_values(OUT_ROWS);
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

static void amx_prepare_scores(const amx_args *a, const amx_thread *th,
                               const fc_splitkv_tile *t, int64_t mine) {
  /* Units head-major, so a head's pack p holds its units PACK p .. */
  const int64_t packs = packs_of(mine);
  memset(th->planes, 0,
         (size_t)(a->shared.heads_per_tile * packs * a->steps * PLANE) *
             sizeof(uint16_t));
  for (int64_t u = 0; u < th->count; u++) {
    const int64_t h = u / mine, i = u % mine;
    make_planes(a, th, t, u,
                th->planes + (h * packs + i / PACK) * a->steps * PLANE,
                (int)(i % PACK));
  }
  configure_scores();
}

static void amx_load_k(const amx_pass *pass, const char *rows, long stride) {
  const int64_t steps = pass->shape.steps;
  _tile_loadd(2, rows, stride);
  if (steps > 1) _tile_loadd(3, rows + 64, stride);
  if (steps > 2) _tile_loadd(4, rows + 128, stride);
  if (steps > 3) _tile_loadd(5, rows + 192, stride);
}

#define SCORE_TILES(c) FC_AMX_SCORE_TILES(c, planes, PLANE, steps, sums)

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
  fc_amx_finish_scores(&a->shared, p, a->keys, t, th->units[u].kv_head,
                       th->units[u].chunk, j0, n);
}

static void amx_head_scores(const amx_pass *pass, const key_block *block,
                            int64_t h, int64_t j0, int64_t n, int *parity) {
  (void)block; /* bf16 rows carry no scales */
  const amx_thread *th = pass->th;
  const int64_t steps = pass->shape.steps, per_head = pass->per_head;
  const int64_t first = h * per_head, packs = packs_of(per_head);
  for (int64_t pack = 0; pack < packs; pack++) {
    const uint16_t *planes = th->planes + (h * packs + pack) * steps * PLANE;
    float *sums = th->score_sums + *parity * BLOCK * COLUMNS;
    if (*parity)
      SCORE_TILES(1);
    else
      SCORE_TILES(0);
    *parity ^= 1;
    const int64_t u0 = first + pack * PACK;
    for (int64_t u = u0; u < first + per_head && u < u0 + PACK; u++)
      finish_block_scores(pass->a, th, pass->t, u, sums, (int)(u - u0), j0, n);
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

static void amx_head_values(const amx_pass *pass, const row_walk *walk,
                            int64_t h, int64_t g0, int blocks,
                            fc_prefetch_sweep *sweep) {
  const amx_args *a = pass->a;
  const amx_thread *th = pass->th;
  const fc_splitkv_tile *t = pass->t;
  const int64_t steps = pass->shape.steps, per_head = pass->per_head;
  const int64_t first = h * per_head;
  const int64_t block_lines = BLOCK * pass->row_bytes / 64;
  const char *rows[GROUP / BLOCK];
  long strides[GROUP / BLOCK];
  for (int i = 0; i < blocks; i++) {
    key_block block;
    block_at(&a->shared, walk, t, g0 + BLOCK * i, false, &block);
    rows[i] = block_run(&block, pass->row_bytes,
                        th->v_pack + i * BLOCK * a->dim, &strides[i]);
  }
  for (int64_t u = first; u < first + per_head; u++) {
    bool active = false;
    for (int s = 0; s < CHUNK; s++) active = active || th->units[u].active[s];
    if (!active) continue;
    group_weights(a, th, t, u, g0);
    float *o = th->o + u * CHUNK * a->dim;
    OUTPUT_TILES(_tile_loadd, o);
    for (int i = 0; i < blocks; i++) {
      if (i % 2)
        VALUE_TILES(5, rows[i], strides[i]);
      else
        VALUE_TILES(4, rows[i], strides[i]);
      sweep_lines(sweep, block_lines / per_head);
    }
    OUTPUT_TILES(_tile_stored, o);
  }
}

static bool amx_unit_on_tiles(const amx_unit *unit) {
  (void)unit; /* every unit: whether it stands is known after */
  return true;
}

/* Where column d of slot s lies in a unit's o. */
static int64_t out_index(int s, int64_t d) {
  const int64_t r = d % STEP;
  return (d / STEP * OUT_ROWS + (r % 2) * CHUNK + s) * 16 + r / 2;
}

/* A unit's outputs stand where they are all finite. */
static bool amx_tiles_stand(const amx_args *a, const amx_thread *th,
                            int64_t u) {
  const float *o = th->o + u * CHUNK * a->dim;
  __mmask16 bad = 0;
  for (int64_t i = 0; i < CHUNK * a->dim; i += 16)
    bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_load_ps(o + i)),
                              _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
  return bad == 0;
}

static void amx_add_row_f32(const amx_args *a, float *o, int s, const char *row,
                            float weight, float scale, float zero) {
  (void)scale, (void)zero; /* bf16 rows carry no scales */
  const uint16_t *elements = (const uint16_t *)row;
  for (int64_t d = 0; d < a->dim; d++)
    o[out_index(s, d)] += weight * fc_bf16_to_f32(elements[d]);
}

/* Slot s's o back in column order, from its even and odd rows. */
static float *amx_slot_o(const amx_args *a, const amx_thread *th, int64_t u,
                         int s, bool work) {
  const __m512i first_half =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second_half =
      _mm512_add_epi32(first_half, _mm512_set1_epi32(8));
  const float *o = th->o + u * CHUNK * a->dim;
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
  return th->natural;
}

/* The registry row. */
flashcpu_status fc_decode_splitkv_amx__amxbf16(const fc_kernel_env *env,
                                               const fc_problem *p,
                                               fc_kernel_plan *plan) {
  amx_args a;
  init_args(&a, env, p);
  a.steps = p->head_dim / STEP;
  return fc_splitkv_plan_args(env, plan, &a, sizeof a, tile, scratch_for_team);
}
