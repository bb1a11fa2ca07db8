/* Split-KV decode of bf16 q on F8_E4M3 and F8_E5M2 K and V caches (one
 * scale per row) on AMX-BF16 tiles, for CPUs that have them and
 * AVX512-VBMI (head_dim = v_head_dim, a multiple of 32 up to 128): the
 * tile products of the AMX decode driver (splitkv_amx_driver.inc).
 *
 * The vector F8 kernel widens each code to f32 and does an FMA per
 * element and query head. Every E4M3 and E5M2 value is exact in bf16, so
 * here a block's codes are widened to bf16 by byte tables
 * (splitkv_amx_f8_codes.h) into a staging block the tiles read, and the
 * row's scale multiplies each key's sums and weights, not its elements.
 *   scores: as the bf16 AMX kernel's, each slot's q scaled to [1, 2) by
 *      a power of 2 (the tiles flush subnormals, which the scale would
 *      magnify); a block whose scales are not all finite is scored in f32;
 *   values: V staged two keys a dword (16 columns a tile); each weight
 *      times its row's scale split exactly into bf16 hi + lo + lo2, rows
 *      0..11 of one A tile (3 parts x 4 slots): f32 accuracy.
 * With two chunks or more per kv head the tiles serve them all: 1.3-1.9x
 * the vector F8 kernel on an Intel Xeon core; with one, each block's chain
 * of tile products (8 tile registers, not renamed) costs what the
 * widening saves, so it is not wanted there.
 * A NaN or inf code or scale reaches the tiles' outputs; a unit whose
 * outputs are not all finite does not stand, and the driver computes its
 * values again in f32 (only the keys each slot sees counting). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/score.h"
#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/splitkv_amx_common.h"
#include "kernels/decode/splitkv_amx_f8_codes.h"
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
  HALF = 32,                /* keys of a weights tile (16 pairs) */
  W_ROWS = 3 * CHUNK,       /* weights and outputs: hi, lo, lo2 of 4 slots */
  W_BYTES = GROUP / HALF * W_ROWS * HALF * 2 /* a unit's weights tiles */
};
_Static_assert(CHUNK == 4 && BLOCK == 16, "tile shapes assume 4 x 16");

#define AMX_ELEMENT_BYTES 1
/* A skipped head's lines are swept as if read: the sweep keeps its pace. */
#define AMX_SWEEPS_SKIPPED_HEADS 1
/* A unit's outputs: W_ROWS rows of 16 per 16 columns (64 at a time). */
#define AMX_O_FLOATS(dim) (W_ROWS * ((dim) + 63) / 64 * 64)

typedef struct amx_args {
  fc_splitkv_shared shared;
  const fc_problem *p;
  int64_t chunks; /* per kv head, of the largest batch */
  int64_t dim;    /* head_dim = v_head_dim */
  int64_t steps;  /* dim / STEP */
  int64_t keys;   /* split keys, up to a whole group */
  f8_tables k_codes, v_codes;
} amx_args;

typedef struct amx_unit {
  int64_t kv_head, chunk;
  float q_unit[CHUNK]; /* the power of 2 slot s's q was divided by */
  float m[CHUNK], l[CHUNK];
  bool valid[CHUNK], nan[CHUNK], active[CHUNK];
} amx_unit;

typedef struct amx_shape {
  int64_t steps;
} amx_shape;

/* Packs of PACK units for a thread with `per_head` units a head. */
static int64_t packs_of(int64_t per_head) { return (per_head + 3) / PACK; }

static size_t plane_bytes(const amx_args *a, int team_size) {
  return (size_t)(a->shared.heads_per_tile *
                  packs_of((a->chunks + team_size - 1) / team_size) * a->steps *
                  PLANE) *
         sizeof(uint16_t);
}

/* Per unit u: o at u * AMX_O_FLOATS(dim) ([tile][W_ROWS][16]), weights
 * at u * W_BYTES ([GROUP / HALF][W_ROWS][HALF] bf16); planes as the bf16
 * AMX kernel's; K's codes widened in k_stage ([key][dim] bf16), V's in
 * v_stage ([half][tile][16 key pairs][16 columns], two keys a dword);
 * natural: a slot's o in column order. */
#define AMX_ARRAYS(X)                                                          \
  X(units, amx_unit, units * sizeof(amx_unit))                                 \
  X(o, float, units *AMX_O_FLOATS(dim) * sizeof(float))                        \
  X(p, float, units *CHUNK *keys * sizeof(float))                              \
  X(seen, uint16_t, units *CHUNK *keys / BLOCK * sizeof(uint16_t))             \
  X(planes, uint16_t, plane_bytes(a, team_size))                               \
  X(k_pack, char, BLOCK *dim)                                                  \
  X(k_stage, uint16_t, BLOCK *dim * sizeof(uint16_t))                          \
  X(v_stage, uint32_t, GROUP *((dim) + 63) / 64 * 64 * sizeof(uint16_t))       \
  X(weights, uint16_t, units *W_BYTES)                                         \
  X(score_sums, float, 2 * BLOCK * COLUMNS * sizeof(float))                    \
  X(natural, float, dim * sizeof(float))

#include "kernels/decode/splitkv_amx_driver.inc"

static amx_shape amx_shape_of(const amx_args *a) {
  return (amx_shape){a->steps};
}

/* Scores: 0/1 the sums of even/odd blocks (16 keys x 16 slots); 2..5
 * K's steps (16 keys x 32 elements); 6/7 q's planes of even/odd steps. */
static void configure_scores(void) { fc_amx_configure_bf16_scores(); }

/* Values: 0..3 the outputs of 4 V tiles (W_ROWS x 16 columns); 4/5 the
 * weights of a group's halves (W_ROWS x 32 keys); 6/7 V's tiles (16 key
 * pairs x 16 columns). */
static void amx_configure_values(void) { fc_amx_configure_bf16_values(W_ROWS); }

/* Slot s of the unit's q row (bf16), NULL for a slot past the batch. */
static const uint16_t *slot_q(const fc_problem *p, const fc_splitkv_tile *t,
                              const amx_unit *unit, int s) {
  const int64_t slot = unit->chunk * CHUNK + s;
  return unit->valid[s] ? (const uint16_t *)fc_view_row(
                              &p->q, t->b, slot / p->group,
                              unit->kv_head * p->group + slot % p->group)
                        : NULL;
}

/* The unit's q into its pack's B tiles at column `column`, as the bf16
 * AMX kernel makes them, each slot's divided by a power of 2 that brings
 * its largest element to [1, 2): the tiles flush subnormal inputs and
 * sums to zero, which the key's scale, after the sum, would magnify. */
static void make_planes(const amx_args *a, const amx_thread *th,
                        const fc_splitkv_tile *t, int64_t u, uint16_t *planes,
                        int column) {
  const fc_problem *p = a->p;
  amx_unit *unit = &th->units[u];
  uint32_t *plane = (uint32_t *)planes + column * CHUNK;
  for (int s = 0; s < CHUNK; s++) {
    const uint16_t *q = slot_q(p, t, unit, s);
    if (!q) { /* a slot past the batch: zeros (the planes are cleared) */
      unit->q_unit[s] = 1.0f;
      continue;
    }
    __m512 top = _mm512_setzero_ps();
    for (int64_t d = 0; d < a->dim; d += 16)
      top = _mm512_max_ps(top, _mm512_abs_ps(bf16x16(q + d)));
    const float largest = _mm512_reduce_max_ps(top);
    int exponent = 1; /* 0, inf or NaN: q as it is */
    if (largest > 0.0f && largest <= FLT_MAX) frexpf(largest, &exponent);
    unit->q_unit[s] = ldexpf(1.0f, exponent - 1);
    /* 2^(1 - exponent) in two factors: one could overflow */
    const __m512 up = _mm512_set1_ps(ldexpf(1.0f, (1 - exponent) / 2));
    const __m512 up2 =
        _mm512_set1_ps(ldexpf(1.0f, 1 - exponent - (1 - exponent) / 2));
    for (int64_t d = 0; d < a->dim; d += 32) {
      uint32_t pairs[16];
      const __m512 first =
          _mm512_mul_ps(_mm512_mul_ps(bf16x16(q + d), up), up2);
      const __m512 second =
          _mm512_mul_ps(_mm512_mul_ps(bf16x16(q + d + 16), up), up2);
      _mm512_storeu_si512(pairs, (__m512i)_mm512_cvtne2ps_pbh(second, first));
      for (int i = 0; i < 16; i++) plane[(d / 2 + i) * COLUMNS + s] = pairs[i];
    }
  }
}

static void amx_prepare_scores(const amx_args *a, const amx_thread *th,
                               const fc_splitkv_tile *t, int64_t mine) {
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
  const int64_t dim = pass->a->dim, steps = pass->shape.steps;
  const f8_widen w = widen_of(&pass->a->k_codes);
  uint16_t *stage = pass->th->k_stage;
  for (int j = 0; j < BLOCK; j++)
    widen_row(&w, rows + j * stride, dim, stage + j * dim);
  const long bytes = (long)(2 * dim);
  _tile_loadd(2, stage, bytes);
  if (steps > 1) _tile_loadd(3, stage + 32, bytes);
  if (steps > 2) _tile_loadd(4, stage + 64, bytes);
  if (steps > 3) _tile_loadd(5, stage + 96, bytes);
}

#define SCORE_TILES(c) FC_AMX_SCORE_TILES(c, planes, PLANE, steps, sums)

/* A unit's scores of a block from its pack's sums: p[s][key - begin] =
 * sum times the key's scale and q_factor (lanes past n -inf). */
static ALWAYS_INLINE void
finish_block_scores(const amx_args *a, const amx_thread *th,
                    const fc_splitkv_tile *t, int64_t u, const float *sums,
                    int column, __m512 scale, int64_t j0, int64_t n) {
  const __m512i by_slot =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 grouped[BLOCK / 4], slot[CHUNK];
  const float *at = sums + CHUNK * column;
  for (int g = 0; g < BLOCK / 4; g++) {
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
  const amx_unit *unit = &th->units[u];
  float *p = th->p + u * CHUNK * a->keys + (j0 - t->begin);
  for (int s = 0; s < CHUNK; s++) {
    /* q . k as the vector F8 kernel sums it, then the key's scale */
    const __m512 sum = _mm512_mul_ps(
        _mm512_mul_ps(slot[s], _mm512_set1_ps(unit->q_unit[s])), scale);
    _mm512_storeu_ps(
        p + s * a->keys,
        _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), lanes,
                           fc512_saturate(_mm512_mul_ps(sum, factor))));
  }
}

/* A unit's scores of a block in f32, each element its code times its
 * row's scale (a scale that is not finite: the sums' order would
 * matter). */
static void block_scores_in_f32(const amx_args *a, const amx_thread *th,
                                const fc_splitkv_tile *t, int64_t u,
                                const key_block *block, int64_t j0, int64_t n) {
  const fc_problem *p = a->p;
  const amx_unit *unit = &th->units[u];
  float scale[BLOCK];
  _mm512_storeu_ps(scale, block->scale);
  for (int s = 0; s < CHUNK; s++) {
    float *out = th->p + (u * CHUNK + s) * a->keys + (j0 - t->begin);
    const uint16_t *q = slot_q(p, t, unit, s);
    for (int j = 0; j < BLOCK; j++) {
      const char *row = row_of(block, j);
      float sum = 0.0f;
      for (int64_t d = 0; q && d < a->dim; d++)
        sum += fc_bf16_to_f32(q[d]) *
               (fc_quant_code(p->k.dtype, row, d) * scale[j]);
      out[j] = j < n ? fc_saturate(sum * a->shared.q_factor) : -INFINITY;
    }
  }
}

static void amx_head_scores(const amx_pass *pass, const key_block *block,
                            int64_t h, int64_t j0, int64_t n, int *parity) {
  const amx_thread *th = pass->th;
  const int64_t steps = pass->shape.steps, per_head = pass->per_head;
  const int64_t first = h * per_head, packs = packs_of(per_head);
  const bool finite =
      _mm512_cmp_ps_mask(_mm512_abs_ps(block->scale), _mm512_set1_ps(FLT_MAX),
                         _CMP_LE_OQ) == 0xffff;
  for (int64_t pack = 0; pack < packs; pack++) {
    const int64_t u0 = first + pack * PACK;
    const int64_t u1 =
        u0 + PACK < first + per_head ? u0 + PACK : first + per_head;
    if (finite) {
      const uint16_t *planes = th->planes + (h * packs + pack) * steps * PLANE;
      float *sums = th->score_sums + *parity * BLOCK * COLUMNS;
      if (*parity)
        SCORE_TILES(1);
      else
        SCORE_TILES(0);
      *parity ^= 1;
      for (int64_t u = u0; u < u1; u++)
        finish_block_scores(pass->a, th, pass->t, u, sums, (int)(u - u0),
                            block->scale, j0, n);
    } else {
      for (int64_t u = u0; u < u1; u++)
        block_scores_in_f32(pass->a, th, pass->t, u, block, j0, n);
    }
    for (int64_t u = u0; u < u1; u++)
      fc_amx_finish_scores(&pass->a->shared,
                           th->p + u * CHUNK * pass->a->keys +
                               (j0 - pass->t->begin),
                           pass->a->keys, pass->t, th->units[u].kv_head,
                           th->units[u].chunk, j0, n);
  }
}

/* The unit's weights of the group, each times its row's scale (scales[i]
 * for block i), as the A tiles of its two halves of 32 keys: row 4 part +
 * s holds slot s's part (0: hi, 1: lo, 2: lo2) of each key's weight in
 * bf16, in key order (0 where the slot does not see the key or the block
 * is past the split). */
static void group_weights(const amx_args *a, const amx_thread *th,
                          const fc_splitkv_tile *t, int64_t u, int64_t g0,
                          const __m512 *scales) {
  const amx_unit *unit = &th->units[u];
  for (int half = 0; half < GROUP / HALF; half++) {
    uint16_t *tile = th->weights + u * (W_BYTES / 2) + half * W_ROWS * HALF;
    for (int s = 0; s < CHUNK; s++) {
      __m512 w[2];
      for (int k = 0; k < 2; k++) {
        const int i = 2 * half + k;
        const int64_t at = g0 + BLOCK * i - t->begin;
        w[k] = _mm512_setzero_ps();
        if (unit->active[s] && g0 + BLOCK * i < t->end)
          w[k] = _mm512_maskz_mul_ps(
              th->seen[(u * CHUNK + s) * (a->keys / BLOCK) + at / BLOCK],
              _mm512_loadu_ps(th->p + (u * CHUNK + s) * a->keys + at),
              scales[i]);
      }
      fc_amx_bf16_parts(w, tile + s * HALF, CHUNK * HALF);
    }
  }
}

/* A half's products for a quad of V tiles (q0 ..): weights tile wt times
 * each V tile into output tiles 0..3. */
#define VALUE_TILES(wt, v)                                                     \
  do {                                                                         \
    _tile_loadd(6, (v), 64);                                                   \
    _tile_dpbf16ps(0, wt, 6);                                                  \
    _tile_loadd(7, (v) + BLOCK * 16, 64);                                      \
    _tile_dpbf16ps(1, wt, 7);                                                  \
    _tile_loadd(6, (v) + 2 * BLOCK * 16, 64);                                  \
    _tile_dpbf16ps(2, wt, 6);                                                  \
    _tile_loadd(7, (v) + 3 * BLOCK * 16, 64);                                  \
    _tile_dpbf16ps(3, wt, 7);                                                  \
  } while (0)

#define OUTPUT_TILES(op, o)                                                    \
  do {                                                                         \
    op(0, (o), 64);                                                            \
    op(1, (o) + W_ROWS * 16, 64);                                              \
    op(2, (o) + 2 * W_ROWS * 16, 64);                                          \
    op(3, (o) + 3 * W_ROWS * 16, 64);                                          \
  } while (0)

static ALWAYS_INLINE bool unit_active(const amx_unit *u) {
  return u->active[0] || u->active[1] || u->active[2] || u->active[3];
}

static void amx_head_values(const amx_pass *pass, const row_walk *walk,
                            int64_t h, int64_t g0, int blocks,
                            fc_prefetch_sweep *sweep) {
  const amx_args *a = pass->a;
  const amx_thread *th = pass->th;
  const fc_splitkv_tile *t = pass->t;
  const int64_t per_head = pass->per_head, dim = a->dim;
  const int64_t first = h * per_head, quads = (dim + 63) / 64;
  const int64_t row_bytes = pass->row_bytes;
  const int halves = (blocks + 1) / 2;
  const f8_widen w = widen_of(&a->v_codes);
  key_block group[GROUP / BLOCK];
  __m512 scales[GROUP / BLOCK];
  for (int i = 0; i < GROUP / BLOCK; i++) {
    scales[i] = _mm512_setzero_ps();
    if (i >= blocks) continue;
    block_at(&a->shared, walk, t, g0 + BLOCK * i, false, &group[i]);
    scales[i] = group[i].scale;
  }
  /* The weights first: their stores are done by the time the tiles load
   * them. */
  for (int64_t u = first; u < first + per_head; u++)
    if (unit_active(&th->units[u])) group_weights(a, th, t, u, g0, scales);
  for (int i = 0; i < 2 * halves; i++) {
    uint32_t *tiles = th->v_stage + (i / 2) * quads * 4 * BLOCK * 16;
    const int r0 = (i % 2) * (BLOCK / 2);
    if (i >= blocks) { /* past the split: zeros, not stale rows */
      for (int64_t tile = 0; tile < 4 * quads; tile++)
        memset(tiles + (tile * BLOCK + r0) * 16, 0, BLOCK / 2 * 64);
      continue;
    }
    for (int r = 0; r < BLOCK / 2; r++) {
      /* a line per line read */
      sweep_lines(sweep,
                  ((2 * r + 2) * row_bytes) / 64 - ((2 * r) * row_bytes) / 64);
      widen_pair(&w, row_of(&group[i], 2 * r), row_of(&group[i], 2 * r + 1),
                 dim, tiles, r0 + r);
    }
  }
  for (int64_t u = first; u < first + per_head; u++) {
    if (!unit_active(&th->units[u])) continue;
    const uint16_t *weights = th->weights + u * (W_BYTES / 2);
    _tile_loadd(4, weights, 64);
    if (halves > 1) _tile_loadd(5, weights + W_ROWS * HALF, 64);
    for (int64_t quad = 0; quad < quads; quad++) {
      float *o = th->o + u * AMX_O_FLOATS(dim) + quad * 4 * W_ROWS * 16;
      const uint32_t *v = th->v_stage + quad * 4 * BLOCK * 16;
      OUTPUT_TILES(_tile_loadd, o);
      VALUE_TILES(4, v);
      if (halves > 1) VALUE_TILES(5, v + quads * 4 * BLOCK * 16);
      OUTPUT_TILES(_tile_stored, o);
    }
  }
}

static bool amx_unit_on_tiles(const amx_unit *unit) {
  (void)unit; /* every unit: whether it stands is known after */
  return true;
}

/* Where column d of slot s lies in a unit's o (hi's row). */
static int64_t out_index(int s, int64_t d) {
  const int64_t m = d / 64, c = d % 64;
  return ((4 * m + c % 16 / 4) * W_ROWS + s) * 16 + 4 * (c / 16) + c % 4;
}

/* A unit's outputs stand where they are all finite. */
static bool amx_tiles_stand(const amx_args *a, const amx_thread *th,
                            int64_t u) {
  const float *o = th->o + u * AMX_O_FLOATS(a->dim);
  __mmask16 bad = 0;
  for (int64_t i = 0; i < AMX_O_FLOATS(a->dim); i += 16)
    bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_load_ps(o + i)),
                              _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
  return bad == 0;
}

static void amx_add_row_f32(const amx_args *a, float *o, int s, const char *row,
                            float weight, float scale, float zero) {
  (void)zero; /* F8 rows have none */
  const flashcpu_dtype dtype = a->p->v.dtype;
  for (int64_t d = 0; d < a->dim; d++)
    o[out_index(s, d)] += weight * (fc_quant_code(dtype, row, d) * scale);
}

/* Slot s's o back in column order: its three parts' rows added, each
 * 4-column piece to its place. */
static float *amx_slot_o(const amx_args *a, const amx_thread *th, int64_t u,
                         int s, bool work) {
  const float *o = th->o + u * AMX_O_FLOATS(a->dim);
  float sum[64];
  for (int64_t m = 0; work && 64 * m < a->dim; m++) {
    for (int q = 0; q < 4; q++) {
      const float *rows = o + (4 * m + q) * W_ROWS * 16;
      const __m512 all =
          _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(rows + s * 16),
                                      _mm512_load_ps(rows + (CHUNK + s) * 16)),
                        _mm512_load_ps(rows + (2 * CHUNK + s) * 16));
      _mm512_storeu_ps(sum + 16 * q, all);
    }
    const int64_t columns = a->dim - 64 * m < 64 ? a->dim - 64 * m : 64;
    for (int64_t c = 0; c < columns; c += 4)
      memcpy(th->natural + 64 * m + c, sum + 16 * (c % 16 / 4) + 4 * (c / 16),
             4 * sizeof(float));
  }
  return th->natural;
}

/* The registry row. */
flashcpu_status fc_decode_splitkv_amx_f8__amxbf16(const fc_kernel_env *env,
                                                  const fc_problem *p,
                                                  fc_kernel_plan *plan) {
  amx_args a;
  init_args(&a, env, p);
  a.steps = p->head_dim / STEP;
  make_tables(p->k.dtype, &a.k_codes);
  make_tables(p->v.dtype, &a.v_codes);
  return fc_splitkv_plan_args(env, plan, &a, sizeof a, tile, scratch_for_team);
}
