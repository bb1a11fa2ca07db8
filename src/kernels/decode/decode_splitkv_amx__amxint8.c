/* Split-KV decode of I8 or U8 K and V caches on AMX-INT8 tiles, for CPUs
 * that have them (head_dim 64 or 128, one scale per row): the tile
 * products of the AMX decode driver (splitkv_amx_driver.inc).
 *   scores: a 16-key block of a head's K rows is one tile per 64 elements,
 *      shared by the head's chunks of 4 slots; each slot's q rounded to 15
 *      bits (as for VPDPWSSD) and split code = 256 hi + lo into signed
 *      bytes, hi and lo as 8 columns of one tile; 256 hi_sum + lo_sum is
 *      the exact int32 dot product, scaled as the integer vector kernels
 *      scale theirs;
 *   values per 64-key group: each slot's weights times the rows' scales
 *      rounded to 15 bits against the group's largest and split likewise
 *      into 8 byte rows (hi and lo of 4 slots), V's rows interleaved by 4
 *      keys into 16-column tiles shared by the head's chunks; the group's
 *      int32 sums go to o once.
 * A chunk whose q cannot be rounded takes a plain f32 path for its
 * scores, and one whose weights are not finite (a NaN or infinite scale)
 * does not stand: the driver computes its values again in f32, so NaN
 * reaches exactly the rows that see it. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/score.h"
#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_amx_codes.h"
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
  GROUP = 64,      /* keys per values step: one byte tile row per slot */
  STEP = 64,       /* elements per tile row */
  W_LIMIT = 32639, /* weight codes: hi = 127 at most in the balanced split */
  PLANES = 16 * 2 * CHUNK * 4 /* bytes of q's tile per 64-element step */
};

#define AMX_ELEMENT_BYTES 1
/* The values pass prefetches a head's group as it interleaves it. */
#define AMX_SWEEPS_SKIPPED_HEADS 0

typedef struct amx_args {
  fc_splitkv_shared shared;
  const fc_problem *p;
  const fc_row_to_f32_fn *row_to_f32;
  int64_t chunks; /* per kv head, of the largest batch */
  int64_t dim;    /* head_dim = v_head_dim */
  int64_t keys;   /* split keys, up to a whole group */
  bool u8;
} amx_args;

typedef struct amx_unit {
  int64_t kv_head, chunk;
  float q_step[CHUNK], q_sum[CHUNK], m[CHUNK], l[CHUNK];
  bool valid[CHUNK], nan[CHUNK], active[CHUNK];
  bool rounded; /* q rounded: scores on the tiles, else in f32 */
  bool tiles;   /* values on the tiles, else (a weight not finite) in f32 */
} amx_unit;

typedef struct amx_shape {
  int64_t dim;
  bool u8;
} amx_shape;

/* Per unit u: q, o at u * CHUNK * dim, planes at u * (dim / STEP) *
 * PLANES. */
#define AMX_ARRAYS(X)                                                          \
  X(units, amx_unit, units * sizeof(amx_unit))                                 \
  X(q, float, units *CHUNK *dim * sizeof(float))                               \
  X(o, float, units *CHUNK *dim * sizeof(float))                               \
  X(p, float, units *CHUNK *keys * sizeof(float))                              \
  X(seen, uint16_t, units *CHUNK *keys / BLOCK * sizeof(uint16_t))             \
  /* [CHUNK][dim]: one unit's, while rounding */                               \
  X(codes, int16_t, CHUNK *dim * sizeof(int16_t))                              \
  X(planes, unsigned char, units *dim / STEP * PLANES)                         \
  /* [dim / 64][4][16][64]: a head's group of V */                             \
  X(v_tiles, unsigned char, 4 * 16 * dim)                                      \
  /* [8 rows: hi, lo of 4 slots][GROUP] */                                     \
  X(w_bytes, unsigned char, 2 * CHUNK * GROUP)                                 \
  X(k_pack, char, BLOCK *dim)                                                  \
  /* [dim / 64][4][8 rows][16] */                                              \
  X(sums, int32_t, 4 * 2 * CHUNK * 16 * (dim / STEP) * sizeof(int32_t))        \
  /* [2][BLOCK][8] */                                                          \
  X(score_sums, int32_t, 2 * BLOCK * 2 * CHUNK * sizeof(int32_t))

#include "kernels/decode/splitkv_amx_driver.inc"

static amx_shape amx_shape_of(const amx_args *a) {
  const amx_shape shape = {a->dim, a->u8};
  return shape;
}

/* One configuration for a launch tile (LDTILECFG costs as much as a
 * block's products): 0/1 the score sums of even/odd blocks (16 keys x 8
 * columns: hi and lo of 4 slots); 2/3 K's two 64-element steps, or V by 4
 * keys (16 rows x 16 columns x 4 keys); 4/5 q's planes of the two steps
 * (16 rows x 8 columns x 4 bytes); 6 the weights' bytes (8 rows: hi and lo
 * of 4 slots, x 64 keys); 7 the value sums (8 rows x 16 columns). */
static void configure_tiles(void) {
  static const unsigned char rows[8] = {16, 16, 16,        16,
                                        16, 16, 2 * CHUNK, 2 * CHUNK};
  static const unsigned short bytes[8] = {2 * CHUNK * 4, 2 * CHUNK * 4, 64, 64,
                                          2 * CHUNK * 4, 2 * CHUNK * 4, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* One configuration serves both passes. */
static void amx_configure_values(void) {}

/* The chunk's codes as the scores' B tiles, per 64-element step: byte
 * 32 r + 4 n + i is element 4 r + i of slot n's hi (n < 4) or of slot
 * n - 4's lo. */
static void make_planes(const int16_t *codes, int64_t dim,
                        unsigned char *planes) {
  for (int64_t step = 0; step < dim / STEP; step++) {
    unsigned char bytes[2 * CHUNK][STEP];
    for (int s = 0; s < CHUNK; s++)
      for (int half = 0; half < 2; half++) {
        const __m512i c =
            _mm512_loadu_si512(codes + s * dim + step * STEP + 32 * half);
        const __m512i lo = fc_amx_low_byte16(c);
        const __m512i hi = _mm512_srai_epi16(_mm512_sub_epi16(c, lo), 8);
        _mm256_storeu_si256((__m256i *)&bytes[s][32 * half],
                            _mm512_cvtepi16_epi8(hi));
        _mm256_storeu_si256((__m256i *)&bytes[CHUNK + s][32 * half],
                            _mm512_cvtepi16_epi8(lo));
      }
    unsigned char *plane = planes + step * PLANES;
    for (int r = 0; r < STEP / 4; r++)
      for (int n = 0; n < 2 * CHUNK; n++)
        memcpy(plane + 32 * r + 4 * n, &bytes[n][4 * r], 4);
  }
}

/* The unit's slots' q rounded (their steps and sums) and made into its
 * planes; unit->rounded false where some slot's q cannot be rounded. */
static void prepare_unit(const amx_args *a, const amx_thread *th,
                         const fc_splitkv_tile *t, int64_t u) {
  const fc_problem *p = a->p;
  const int64_t dim = a->dim;
  amx_unit *unit = &th->units[u];
  unit->rounded = true;
  unit->tiles = true;
  for (int s = 0; s < CHUNK; s++) {
    const int64_t slot = unit->chunk * CHUNK + s;
    float *q = th->q + (u * CHUNK + s) * dim;
    memset(q, 0, (size_t)dim * sizeof(float));
    if (unit->valid[s]) /* set with the unit (tile) */
      a->row_to_f32[p->q.dtype](
          fc_view_row(&p->q, t->b, slot / p->group,
                      unit->kv_head * p->group + slot % p->group),
          dim, a->shared.q_factor, q);
    unit->rounded =
        unit->rounded && fc_amx_round_q(q, dim, th->codes + s * dim,
                                        &unit->q_step[s], &unit->q_sum[s]);
  }
  if (unit->rounded)
    make_planes(th->codes, dim, th->planes + u * (dim / STEP) * PLANES);
}

static void amx_prepare_scores(const amx_args *a, const amx_thread *th,
                               const fc_splitkv_tile *t, int64_t mine) {
  (void)mine; /* each unit has planes of its own */
  configure_tiles();
  for (int64_t u = 0; u < th->count; u++) prepare_unit(a, th, t, u);
}

static void amx_load_k(const amx_pass *pass, const char *rows, long stride) {
  _tile_loadd(2, rows, stride);
  if (pass->shape.dim == 128) _tile_loadd(3, rows + STEP, stride);
}

/* One block's tile products for a unit: q's planes into tiles 4/5, K's
 * steps (already in tiles 2/3) times them into sum tile c. */
#define SCORE_TILES(c)                                                         \
  do {                                                                         \
    _tile_loadd(4, planes, 2 * CHUNK * 4);                                     \
    _tile_zero(c);                                                             \
    if (u8)                                                                    \
      _tile_dpbusd(c, 2, 4);                                                   \
    else                                                                       \
      _tile_dpbssd(c, 2, 4);                                                   \
    if (dim == 128) {                                                          \
      _tile_loadd(5, planes + PLANES, 2 * CHUNK * 4);                          \
      if (u8)                                                                  \
        _tile_dpbusd(c, 3, 5);                                                 \
      else                                                                     \
        _tile_dpbssd(c, 3, 5);                                                 \
    }                                                                          \
    _tile_stored(c, sums, 2 * CHUNK * 4);                                      \
  } while (0)

/* A unit's scores of a block from its tile sums: p[s][key - begin]
 * (lanes past n -inf), finished where the problem needs it. */
static ALWAYS_INLINE void
finish_block_scores(const amx_args *a, const amx_thread *th,
                    const fc_splitkv_tile *t, int64_t u, const int32_t *sums,
                    const key_block *block, int64_t j0, int64_t n) {
  const amx_unit *unit = &th->units[u];
  /* Lanes 8 key + n (n < 4: hi of slot n, else lo of slot n - 4) of two
   * keys' rows to hi and lo at lane 4 key + slot of four keys. */
  const __m512i his = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                        19, 24, 25, 26, 27);
  const __m512i los = _mm512_add_epi32(his, _mm512_set1_epi32(4));
  const __m512i by_slot =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 grouped[BLOCK / 4], slot[CHUNK];
  for (int g = 0; g < BLOCK / 4; g++) {
    const __m512i pair0 = _mm512_load_si512(sums + 32 * g);
    const __m512i pair1 = _mm512_load_si512(sums + 32 * g + 16);
    const __m512i sum = _mm512_add_epi32(
        _mm512_slli_epi32(_mm512_permutex2var_epi32(pair0, his, pair1), 8),
        _mm512_permutex2var_epi32(pair0, los, pair1));
    grouped[g] = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(by_slot, sum));
  }
  fc512_transpose_128x4(grouped, slot);
  const __mmask16 lanes = fc512_tail_mask(n);
  float *p = th->p + u * CHUNK * a->keys + (j0 - t->begin);
  for (int s = 0; s < CHUNK; s++) {
    __m512 value = slot[s];
    if (a->u8)
      value =
          _mm512_fnmadd_ps(block->zero, _mm512_set1_ps(unit->q_sum[s]), value);
    value = _mm512_mul_ps(_mm512_mul_ps(value, block->scale),
                          _mm512_set1_ps(unit->q_step[s]));
    _mm512_storeu_ps(p + s * a->keys,
                     _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), lanes,
                                        fc512_saturate(value)));
  }
}

/* A unit's scores of a block in f32 (q could not be rounded). */
static void block_scores_in_f32(const amx_args *a, const amx_thread *th,
                                const fc_splitkv_tile *t, int64_t u,
                                const key_block *block, int64_t j0, int64_t n) {
  float scale[BLOCK], zero[BLOCK];
  _mm512_storeu_ps(scale, block->scale);
  _mm512_storeu_ps(zero, block->zero);
  for (int s = 0; s < CHUNK; s++) {
    const float *q = th->q + (u * CHUNK + s) * a->dim;
    float *out = th->p + (u * CHUNK + s) * a->keys + (j0 - t->begin);
    for (int j = 0; j < BLOCK; j++) {
      const char *row = row_of(block, j);
      float sum = 0.0f;
      for (int64_t d = 0; d < a->dim; d++) {
        const float code = a->u8 ? (float)((const unsigned char *)row)[d]
                                 : (float)((const signed char *)row)[d];
        sum += q[d] * ((code - zero[j]) * scale[j]);
      }
      out[j] = j < n ? fc_saturate(sum) : -INFINITY;
    }
  }
}

static void amx_head_scores(const amx_pass *pass, const key_block *block,
                            int64_t h, int64_t j0, int64_t n, int *parity) {
  const amx_args *a = pass->a;
  const amx_thread *th = pass->th;
  const fc_splitkv_tile *t = pass->t;
  const int64_t dim = pass->shape.dim, per_head = pass->per_head;
  const bool u8 = pass->shape.u8;
  const int64_t first = h * per_head;
  for (int64_t u = first; u < first + per_head; u++) {
    if (th->units[u].rounded) {
      const unsigned char *planes = th->planes + u * (dim / STEP) * PLANES;
      int32_t *sums = th->score_sums + *parity * BLOCK * 2 * CHUNK;
      if (*parity)
        SCORE_TILES(1);
      else
        SCORE_TILES(0);
      *parity ^= 1;
      finish_block_scores(a, th, t, u, sums, block, j0, n);
    } else {
      block_scores_in_f32(a, th, t, u, block, j0, n);
    }
    fc_amx_finish_scores(&a->shared,
                         th->p + u * CHUNK * a->keys + (j0 - t->begin), a->keys,
                         t, th->units[u].kv_head, th->units[u].chunk, j0, n);
  }
}

/* One column tile of a group (index: half * 4 + k): V by 4 keys into tile
 * v, the sums of both weight planes into tile 7, stored at sums. */
#define VALUE_TILE(v, index, sums)                                             \
  do {                                                                         \
    _tile_zero(7);                                                             \
    _tile_loadd(v, th->v_tiles + (index)*16 * 64, 64);                         \
    if (u8)                                                                    \
      _tile_dpbsud(7, 6, v);                                                   \
    else                                                                       \
      _tile_dpbssd(7, 6, v);                                                   \
    _tile_stored(7, sums, 64);                                                 \
  } while (0)

/* A unit's values of a 64-key group on the tiles (V of its head already
 * in v_tiles): o[s] += sum over the group of w_s,j (v_j - zero_j) scale_j.
 * false (o untouched) where some weight times its row's scale is not
 * finite. */
static bool group_values_on_tiles(const amx_args *a, const amx_thread *th,
                                  const fc_splitkv_tile *t, int64_t u,
                                  const key_block *blocks, int64_t g0) {
  const amx_unit *unit = &th->units[u];
  const int64_t dim = a->dim, halves = dim / STEP;
  const bool u8 = a->u8;
  __m512 w[CHUNK][GROUP / BLOCK], largest[CHUNK];
  __mmask16 bad = 0;
  for (int s = 0; s < CHUNK; s++) {
    largest[s] = _mm512_setzero_ps();
    const float *p = th->p + (u * CHUNK + s) * a->keys;
    const uint16_t *seen = th->seen + (u * CHUNK + s) * (a->keys / BLOCK);
    for (int i = 0; i < GROUP / BLOCK; i++) {
      const int64_t at = g0 + BLOCK * i - t->begin;
      if (!unit->active[s] || g0 + BLOCK * i >= t->end) {
        w[s][i] = _mm512_setzero_ps();
        continue;
      }
      w[s][i] = _mm512_maskz_mul_ps(seen[at / BLOCK], _mm512_loadu_ps(p + at),
                                    blocks[i].scale);
      const __m512 size = _mm512_abs_ps(w[s][i]);
      bad |= _mm512_cmp_ps_mask(size, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
      largest[s] = _mm512_max_ps(largest[s], size);
    }
  }
  if (bad) return false;
  /* The weights as codes 0..W_LIMIT against the group's largest, split
   * 256 hi + lo into rows s (hi) and 4 + s (lo); U8's zero points give an
   * offset per slot. */
  float step[CHUNK], offset[CHUNK];
  for (int s = 0; s < CHUNK; s++) {
    const float top = _mm512_reduce_max_ps(largest[s]);
    const float inverse = top > 0.0f ? (float)W_LIMIT / top : 0.0f;
    if (!(inverse <= FLT_MAX)) return false;
    step[s] = top / (float)W_LIMIT;
    __m512 zero_sum = _mm512_setzero_ps();
    for (int i = 0; i < GROUP / BLOCK; i++) {
      const __m512i codes =
          _mm512_cvtps_epi32(_mm512_mul_ps(w[s][i], _mm512_set1_ps(inverse)));
      const __m512i lo = _mm512_sub_epi32(
          _mm512_and_si512(_mm512_add_epi32(codes, _mm512_set1_epi32(128)),
                           _mm512_set1_epi32(0xff)),
          _mm512_set1_epi32(128));
      const __m512i hi = _mm512_srai_epi32(_mm512_sub_epi32(codes, lo), 8);
      _mm_storeu_si128((__m128i *)(th->w_bytes + s * GROUP + BLOCK * i),
                       _mm512_cvtepi32_epi8(hi));
      _mm_storeu_si128(
          (__m128i *)(th->w_bytes + (CHUNK + s) * GROUP + BLOCK * i),
          _mm512_cvtepi32_epi8(lo));
      if (u8)
        zero_sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(codes), blocks[i].zero,
                                   zero_sum);
    }
    offset[s] = u8 ? _mm512_reduce_add_ps(zero_sum) : 0.0f;
  }
  _tile_loadd(6, th->w_bytes, GROUP);
  for (int64_t index = 0; index < 4 * halves; index += 2) {
    VALUE_TILE(2, index, th->sums + index * 2 * CHUNK * 16);
    VALUE_TILE(3, index + 1, th->sums + (index + 1) * 2 * CHUNK * 16);
  }
  /* o += step (sum - offset), the columns back in order. */
  for (int s = 0; s < CHUNK; s++) {
    if (!unit->active[s]) continue;
    const __m512 factor = _mm512_set1_ps(step[s]);
    const __m512 shift = _mm512_set1_ps(offset[s]);
    for (int64_t half = 0; half < halves; half++) {
      __m512 by_k[4], by_lane[4];
      for (int k = 0; k < 4; k++) {
        const int32_t *c = th->sums + (half * 4 + k) * 2 * CHUNK * 16;
        by_k[k] = _mm512_cvtepi32_ps(_mm512_add_epi32(
            _mm512_slli_epi32(_mm512_load_si512(c + s * 16), 8),
            _mm512_load_si512(c + (CHUNK + s) * 16)));
      }
      fc512_transpose_128x4(by_k, by_lane);
      for (int lane = 0; lane < 4; lane++) {
        float *out = th->o + (u * CHUNK + s) * dim + half * STEP + 16 * lane;
        const __m512 sum =
            u8 ? _mm512_sub_ps(by_lane[lane], shift) : by_lane[lane];
        _mm512_storeu_ps(out,
                         _mm512_fmadd_ps(factor, sum, _mm512_loadu_ps(out)));
      }
    }
  }
  return true;
}

static void amx_head_values(const amx_pass *pass, const row_walk *walk,
                            int64_t h, int64_t g0, int blocks,
                            fc_prefetch_sweep *sweep) {
  (void)blocks; /* past the split, a block's scales are zeros */
  const amx_args *a = pass->a;
  const amx_thread *th = pass->th;
  const fc_splitkv_tile *t = pass->t;
  const int64_t halves = pass->shape.dim / STEP, per_head = pass->per_head;
  const int64_t first = h * per_head;
  key_block group[GROUP / BLOCK];
  for (int i = 0; i < GROUP / BLOCK; i++) {
    const int64_t key = g0 + BLOCK * i;
    if (key >= t->end) {
      group[i] = group[i - 1];
      group[i].scale = group[i].zero = _mm512_setzero_ps();
      continue;
    }
    block_at(&a->shared, walk, t, key, false, &group[i]);
  }
  /* V by 4 keys per tile row: v_tiles[half][k][r] holds keys 4 r .. 4 r + 3
   * at columns 64 half, interleaved. */
  for (int r = 0; r < GROUP / 4; r++) {
    const key_block *block = &group[r / (BLOCK / 4)];
    const int j = 4 * (r % (BLOCK / 4));
    const char *quad_rows[4] = {row_of(block, j), row_of(block, j + 1),
                                row_of(block, j + 2), row_of(block, j + 3)};
    for (int64_t half = 0; half < halves; half++) {
      __m512i quad[4];
      sweep_lines(sweep, 4); /* a line per line read */
      fc_amx_interleave4(quad_rows, STEP * half, quad);
      for (int k = 0; k < 4; k++)
        _mm512_store_si512(th->v_tiles + ((half * 4 + k) * 16 + r) * 64,
                           quad[k]);
    }
  }
  for (int64_t u = first; u < first + per_head; u++)
    if (th->units[u].tiles && !group_values_on_tiles(a, th, t, u, group, g0))
      th->units[u].tiles = false;
}

static bool amx_unit_on_tiles(const amx_unit *unit) { return unit->tiles; }

static bool amx_tiles_stand(const amx_args *a, const amx_thread *th,
                            int64_t u) {
  (void)a; /* known from the weights, in the values pass */
  return th->units[u].tiles;
}

static void amx_add_row_f32(const amx_args *a, float *o, int s, const char *row,
                            float weight, float scale, float zero) {
  const int64_t dim = a->dim;
  for (int64_t d = 0; d < dim; d++) {
    const float code = a->u8 ? (float)((const unsigned char *)row)[d]
                             : (float)((const signed char *)row)[d];
    o[s * dim + d] += weight * ((code - zero) * scale);
  }
}

static float *amx_slot_o(const amx_args *a, const amx_thread *th, int64_t u,
                         int s, bool work) {
  (void)work; /* o is in column order as it is */
  return th->o + (u * CHUNK + s) * a->dim;
}

/* The registry row. */
flashcpu_status fc_decode_splitkv_amx__amxint8(const fc_kernel_env *env,
                                               const fc_problem *p,
                                               fc_kernel_plan *plan) {
  amx_args a;
  init_args(&a, env, p);
  a.row_to_f32 = env->row_to_f32;
  a.u8 = p->k.dtype == FLASHCPU_DTYPE_U8;
  return fc_splitkv_plan_args(env, plan, &a, sizeof a, tile, scratch_for_team);
}
