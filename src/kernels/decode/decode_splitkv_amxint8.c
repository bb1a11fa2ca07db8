/* Split-KV decode of I8 or U8 K and V caches on AMX-INT8 tiles, for CPUs
 * that have them (head_dim 64 or 128, one scale per row).
 *
 * The vector kernels (decode_splitkv_driver.inc) walk a split in 16-key
 * blocks with an online softmax, and their per-key instructions, not the
 * bytes, bound them. Here a tile's split goes in three passes, each over
 * the keys in address order with every kv head of the tile per block (a
 * BSHD cache then reads as one stream), the tiles doing the products:
 *   1. scores: a 16-key block of a head's K rows is one tile per 64
 *      elements (read where the rows lie when evenly spaced), shared by the
 *      head's chunks of 4 slots; each slot's q rounded to 15 bits (as for
 *      VPDPWSSD) and split code = 256 hi + lo into signed bytes, hi and lo
 *      as 8 columns of one tile; 256 hi_sum + lo_sum is the exact int32 dot
 *      product, scaled as the integer vector kernels scale theirs;
 *   2. softmax over the whole split at once (its max is known: no rescale);
 *   3. values per 64-key group: each slot's weights times the rows' scales
 *      rounded to 15 bits against the group's largest and split likewise
 *      into 8 byte rows (hi and lo of 4 slots), V's rows interleaved by 4
 *      keys into 16-column tiles shared by the head's chunks; the group's
 *      int32 sums go to o once.
 * A chunk whose q cannot be rounded, or whose weights are not finite (a
 * NaN or infinite scale), takes a plain f32 path, so NaN reaches exactly
 * the rows that see it. Splits, states and merge are the shared split-KV
 * ones (splitkv_common.c). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/score.h"
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
  GROUP = 64,      /* keys per values step: one byte tile row per slot */
  STEP = 64,       /* elements per tile row */
  Q_LIMIT = 16383, /* q codes: 15 bits, as the VPDPWSSD kernel's */
  W_LIMIT = 32639, /* weight codes: hi = 127 at most in the balanced split */
  PLANES = 16 * 2 * CHUNK * 4 /* bytes of q's tile per 64-element step */
};

typedef struct amx_args {
  fc_splitkv_shared shared;
  const fc_problem *p;
  const fc_row_to_f32_fn *row_to_f32;
  int64_t chunks; /* per kv head, of the largest batch */
  int64_t dim;    /* head_dim = v_head_dim */
  int64_t keys;   /* split keys, up to a whole group */
  bool u8;
} amx_args;

/* A (kv head, chunk) of a tile that a thread computes. */
typedef struct amx_unit {
  int64_t kv_head, chunk;
  float q_step[CHUNK], q_sum[CHUNK], m[CHUNK], l[CHUNK];
  bool valid[CHUNK], nan[CHUNK], active[CHUNK];
  bool rounded; /* q rounded: scores on the tiles, else in f32 */
  bool tiles;   /* values on the tiles, else (a weight not finite) in f32 */
} amx_unit;

/* One thread's arrays in the team scratch, each 64-byte aligned; per unit
 * u: q, o at u * CHUNK * dim, p at u * CHUNK * keys, seen at u * CHUNK *
 * keys / BLOCK, planes at u * (dim / STEP) * PLANES. */
typedef struct amx_thread {
  amx_unit *units;
  int64_t count; /* units: heads per tile x chunks of this thread */
  float *q, *o, *p;
  uint16_t *seen;
  int16_t *codes; /* [CHUNK][dim]: one unit's, while rounding */
  unsigned char *planes;
  unsigned char *v_tiles; /* [dim / 64][4][16][64]: a head's group of V */
  unsigned char *w_bytes; /* [8 rows: hi, lo of 4 slots][GROUP] */
  char *k_pack;           /* [BLOCK][dim] */
  int32_t *sums;          /* [dim / 64][4][8 rows][16] */
  int32_t *score_sums;    /* [2][BLOCK][8] */
} amx_thread;

static int64_t units_of_rank(const amx_args *a, int team_size) {
  return (a->chunks + team_size - 1) / team_size * a->shared.heads_per_tile;
}

static size_t rank_bytes(const amx_args *a, int team_size) {
  const size_t dim = (size_t)a->dim, keys = (size_t)a->keys;
  const size_t units = (size_t)units_of_rank(a, team_size);
  return fc_amx_up64(units * sizeof(amx_unit)) +
         2 * fc_amx_up64(units * CHUNK * dim * sizeof(float)) +
         fc_amx_up64(units * CHUNK * keys * sizeof(float)) +
         fc_amx_up64(units * CHUNK * keys / BLOCK * sizeof(uint16_t)) +
         fc_amx_up64(CHUNK * dim * sizeof(int16_t)) +
         fc_amx_up64(units * dim / STEP * PLANES) + fc_amx_up64(4 * 16 * dim) +
         fc_amx_up64(2 * CHUNK * GROUP) + fc_amx_up64(BLOCK * dim) +
         fc_amx_up64(4 * 2 * CHUNK * 16 * (dim / STEP) * sizeof(int32_t)) +
         fc_amx_up64(2 * BLOCK * 2 * CHUNK * sizeof(int32_t)) + 64;
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
  TAKE(q, float, units *CHUNK *dim * sizeof(float));
  TAKE(o, float, units *CHUNK *dim * sizeof(float));
  TAKE(p, float, units *CHUNK *keys * sizeof(float));
  TAKE(seen, uint16_t, units * CHUNK * keys / BLOCK * sizeof(uint16_t));
  TAKE(codes, int16_t, CHUNK * dim * sizeof(int16_t));
  TAKE(planes, unsigned char, units *dim / STEP * PLANES);
  TAKE(v_tiles, unsigned char, 4 * 16 * dim);
  TAKE(w_bytes, unsigned char, 2 * CHUNK * GROUP);
  TAKE(k_pack, char, BLOCK *dim);
  TAKE(sums, int32_t, 4 * 2 * CHUNK * 16 * (dim / STEP) * sizeof(int32_t));
  TAKE(score_sums, int32_t, 2 * BLOCK * 2 * CHUNK * sizeof(int32_t));
#undef TAKE
  th.count = 0;
  return th;
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

/* code = 256 hi + lo with lo in -128..127 (both signed bytes): 16-bit
 * lanes. */
static ALWAYS_INLINE __m512i low_byte16(__m512i code) {
  return _mm512_sub_epi16(
      _mm512_and_si512(_mm512_add_epi16(code, _mm512_set1_epi16(128)),
                       _mm512_set1_epi16(0xff)),
      _mm512_set1_epi16(128));
}

/* q (f32, dim) as codes |c| <= Q_LIMIT, round to nearest, with its step
 * and the codes' sum; false where q is not finite or its step would be
 * subnormal (the f32 path). */
static bool round_q(const float *q, int64_t dim, int16_t *codes, float *step,
                    float *sum) {
  __m512 top = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t d = 0; d < dim; d += 16) {
    const __m512 x = _mm512_abs_ps(_mm512_loadu_ps(q + d));
    bad |= _mm512_cmp_ps_mask(x, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
    top = _mm512_max_ps(top, x);
  }
  if (bad) return false;
  const float largest = _mm512_reduce_max_ps(top);
  const float s = largest > 0.0f ? largest / (float)Q_LIMIT : 1.0f;
  if (!(s >= FLT_MIN)) return false;
  __m512i total = _mm512_setzero_si512();
  const __m512 limit = _mm512_set1_ps((float)Q_LIMIT);
  for (int64_t d = 0; d < dim; d += 16) {
    __m512 c = _mm512_roundscale_ps(
        _mm512_div_ps(_mm512_loadu_ps(q + d), _mm512_set1_ps(s)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    c = _mm512_min_ps(
        limit, _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), limit), c));
    const __m512i ci = _mm512_cvttps_epi32(c);
    total = _mm512_add_epi32(total, ci);
    _mm256_storeu_si256((__m256i *)(codes + d), _mm512_cvtepi32_epi16(ci));
  }
  *step = s;
  *sum = (float)_mm512_reduce_add_epi32(total);
  return true;
}

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
        const __m512i lo = low_byte16(c);
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
    unit->rounded = unit->rounded && round_q(q, dim, th->codes + s * dim,
                                             &unit->q_step[s], &unit->q_sum[s]);
  }
  if (unit->rounded)
    make_planes(th->codes, dim, th->planes + u * (dim / STEP) * PLANES);
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

/* Pass 1: every unit's scores, block by block, each block's heads in
 * turn. */
static void scores_pass(const amx_args *a, const amx_thread *th,
                        const fc_splitkv_tile *t) {
  const fc_problem *p = a->p;
  const int64_t dim = a->dim;
  const bool u8 = a->u8;
  const int64_t per_head = th->count / a->shared.heads_per_tile;
  /* The first block, which no earlier block prefetched. */
  fc_prefetch_sweep first_block =
      sweep_keys(&a->shared, &p->k, t, t->begin, BLOCK, a->dim);
  fc_sweep_all(&first_block);
  int parity = 0;
  for (int64_t j0 = t->begin; j0 < t->end; j0 += BLOCK) {
    const int64_t n = t->end - j0 < BLOCK ? t->end - j0 : BLOCK;
    fc_prefetch_sweep sweep =
        sweep_keys(&a->shared, &p->k, t, j0 + BLOCK, BLOCK, a->dim);
    const int64_t half_lines = n * (dim / 64) / 2;
    for (int64_t h = 0; h < a->shared.heads_per_tile; h++) {
      const int64_t first = h * per_head;
      const row_walk walk = walk_rows(&p->k, t, th->units[first].kv_head);
      key_block block;
      block_at(&a->shared, &walk, t, j0, true, &block);
      sweep_lines(&sweep, half_lines);
      const char *rows = block.base;
      long long stride = (long long)block.stride;
      if (!block.spaced) {
        for (int j = 0; j < BLOCK; j++)
          memcpy(th->k_pack + j * dim, block.rows[j], (size_t)dim);
        rows = th->k_pack;
        stride = dim;
      }
      _tile_loadd(2, rows, stride);
      if (dim == 128) _tile_loadd(3, rows + STEP, stride);
      for (int64_t u = first; u < first + per_head; u++) {
        if (th->units[u].rounded) {
          const unsigned char *planes = th->planes + u * (dim / STEP) * PLANES;
          int32_t *sums = th->score_sums + parity * BLOCK * 2 * CHUNK;
          if (parity)
            SCORE_TILES(1);
          else
            SCORE_TILES(0);
          parity ^= 1;
          finish_block_scores(a, th, t, u, sums, &block, j0, n);
        } else {
          block_scores_in_f32(a, th, t, u, &block, j0, n);
        }
        if (a->shared.needs_finish)
          for (int s = 0; s < CHUNK; s++)
            fc_splitkv_finish(
                &a->shared, th->p + (u * CHUNK + s) * a->keys + (j0 - t->begin),
                t->b, th->units[u].kv_head, th->units[u].chunk * CHUNK + s, j0,
                n, t->kv_length);
      }
      sweep_lines(&sweep, half_lines);
    }
  }
}

/* Pass 2: each valid slot's softmax over the split (invalid slots: empty,
 * inactive). */
static void softmax_unit(const amx_args *a, const amx_thread *th, int64_t u,
                         int64_t n_keys) {
  amx_unit *unit = &th->units[u];
  for (int s = 0; s < CHUNK; s++) {
    unit->m[s] = -INFINITY;
    unit->l[s] = 0.0f;
    unit->nan[s] = unit->active[s] = false;
    if (unit->valid[s])
      fc_amx_slot_softmax(th->p + (u * CHUNK + s) * a->keys,
                          th->seen + (u * CHUNK + s) * (a->keys / BLOCK),
                          (n_keys + BLOCK - 1) / BLOCK, &unit->m[s],
                          &unit->l[s], &unit->nan[s], &unit->active[s]);
  }
}

/* The 4 rows from `rows` (64 bytes each at column offset col) interleaved
 * by key: out[k] holds, per 128-bit lane L, columns 16 L + 4 k .. + 3 as
 * 4 bytes each (keys 0..3). */
static ALWAYS_INLINE void interleave4(const char *const *rows, int64_t col,
                                      __m512i out[4]) {
  const __m512i v0 = _mm512_loadu_si512(rows[0] + col);
  const __m512i v1 = _mm512_loadu_si512(rows[1] + col);
  const __m512i v2 = _mm512_loadu_si512(rows[2] + col);
  const __m512i v3 = _mm512_loadu_si512(rows[3] + col);
  const __m512i a_lo = _mm512_unpacklo_epi8(v0, v1),
                a_hi = _mm512_unpackhi_epi8(v0, v1);
  const __m512i b_lo = _mm512_unpacklo_epi8(v2, v3),
                b_hi = _mm512_unpackhi_epi8(v2, v3);
  out[0] = _mm512_unpacklo_epi16(a_lo, b_lo);
  out[1] = _mm512_unpackhi_epi16(a_lo, b_lo);
  out[2] = _mm512_unpacklo_epi16(a_hi, b_hi);
  out[3] = _mm512_unpackhi_epi16(a_hi, b_hi);
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

/* Pass 3: every unit's o, group by group, each group's heads in turn;
 * units whose weights cannot be rounded are left for values_in_f32. */
static void values_pass(const amx_args *a, const amx_thread *th,
                        const fc_splitkv_tile *t) {
  const fc_problem *p = a->p;
  const int64_t dim = a->dim, halves = dim / STEP;
  const int64_t per_head = th->count / a->shared.heads_per_tile;
  for (int64_t g0 = t->begin; g0 < t->end; g0 += GROUP) {
    fc_prefetch_sweep sweep =
        sweep_keys(&a->shared, &p->v, t, g0 + GROUP, GROUP, a->dim);
    for (int64_t h = 0; h < a->shared.heads_per_tile; h++) {
      const int64_t first = h * per_head;
      bool wanted = false;
      for (int64_t u = first; u < first + per_head; u++)
        for (int s = 0; s < CHUNK; s++)
          wanted = wanted || (th->units[u].tiles && th->units[u].active[s]);
      if (!wanted) continue;
      const row_walk walk = walk_rows(&p->v, t, th->units[first].kv_head);
      key_block blocks[GROUP / BLOCK];
      for (int i = 0; i < GROUP / BLOCK; i++) {
        const int64_t key = g0 + BLOCK * i;
        if (key >= t->end) {
          blocks[i] = blocks[i - 1];
          blocks[i].scale = blocks[i].zero = _mm512_setzero_ps();
          continue;
        }
        block_at(&a->shared, &walk, t, key, false, &blocks[i]);
      }
      /* V by 4 keys per tile row: v_tiles[half][k][r] = interleave4 of
       * keys 4 r .. 4 r + 3 at columns 64 half. */
      for (int r = 0; r < GROUP / 4; r++) {
        const key_block *block = &blocks[r / (BLOCK / 4)];
        const int j = 4 * (r % (BLOCK / 4));
        const char *quad_rows[4] = {row_of(block, j), row_of(block, j + 1),
                                    row_of(block, j + 2), row_of(block, j + 3)};
        for (int64_t half = 0; half < halves; half++) {
          __m512i quad[4];
          sweep_lines(&sweep, 4); /* a line per line read */
          interleave4(quad_rows, STEP * half, quad);
          for (int k = 0; k < 4; k++)
            _mm512_store_si512(th->v_tiles + ((half * 4 + k) * 16 + r) * 64,
                               quad[k]);
        }
      }
      for (int64_t u = first; u < first + per_head; u++)
        if (th->units[u].tiles &&
            !group_values_on_tiles(a, th, t, u, blocks, g0))
          th->units[u].tiles = false;
    }
  }
}

/* A unit's o in f32 over the whole split (some weight could not be
 * rounded). */
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
    float scale[BLOCK], zero[BLOCK];
    _mm512_storeu_ps(scale, block.scale);
    _mm512_storeu_ps(zero, block.zero);
    const int64_t at = j0 - t->begin;
    for (int s = 0; s < CHUNK; s++) {
      if (!unit->active[s]) continue;
      const unsigned sees =
          th->seen[(u * CHUNK + s) * (a->keys / BLOCK) + at / BLOCK];
      for (int64_t j = 0; j < n; j++) {
        if (!((sees >> j) & 1u)) continue;
        const float weight = th->p[(u * CHUNK + s) * a->keys + at + j];
        const char *row = row_of(&block, (int)j);
        for (int64_t d = 0; d < dim; d++) {
          const float code = a->u8 ? (float)((const unsigned char *)row)[d]
                                   : (float)((const signed char *)row)[d];
          o[s * dim + d] += weight * ((code - zero[j]) * scale[j]);
        }
      }
    }
  }
}

/* Writes a unit's partial states; returns how many. */
static int write_unit(const amx_args *a, const amx_thread *th,
                      const fc_splitkv_tile *t, int64_t u, bool work) {
  const amx_unit *unit = &th->units[u];
  int written = 0;
  for (int s = 0; s < CHUNK; s++) {
    if (!unit->valid[s]) continue;
    written++;
    fc_amx_slot_write(fc_splitkv_record(&a->shared, t->b, unit->kv_head,
                                        t->split, unit->chunk * CHUNK + s),
                      work, work && unit->nan[s], work ? unit->m[s] : -INFINITY,
                      work ? unit->l[s] : 0.0f,
                      th->o + (u * CHUNK + s) * a->dim, a->dim);
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
    configure_tiles();
    for (int64_t u = 0; u < th.count; u++) prepare_unit(a, &th, &t, u);
    scores_pass(a, &th, &t);
    fc_prefetch_sweep first_group =
        sweep_keys(&a->shared, &a->p->v, &t, t.begin, GROUP, a->dim);
    fc_sweep_all(&first_group);
    for (int64_t u = 0; u < th.count; u++) {
      softmax_unit(a, &th, u, t.end - t.begin);
      memset(th.o + u * CHUNK * a->dim, 0,
             (size_t)(CHUNK * a->dim) * sizeof(float));
    }
    values_pass(a, &th, &t);
    _tile_release();
    for (int64_t u = 0; u < th.count; u++)
      if (!th.units[u].tiles) values_in_f32(a, &th, &t, u);
  }
  int written = 0;
  for (int64_t u = 0; u < th.count; u++)
    written += write_unit(a, &th, &t, u, work);
  fc_splitkv_tile_written(&a->shared, &t, written);
}

/* The registry row. */
flashcpu_status fc_decode_splitkv_amx__amxint8(const fc_kernel_env *env,
                                               const fc_problem *p,
                                               fc_kernel_plan *plan) {
  amx_args a;
  memset(&a, 0, sizeof a);
  fc_splitkv_shared_init(&a.shared, p, env->settings);
  a.p = p;
  a.row_to_f32 = env->row_to_f32;
  a.chunks = (a.shared.plan.slots + CHUNK - 1) / CHUNK;
  a.dim = p->head_dim;
  a.keys = (a.shared.plan.split_keys + GROUP - 1) / GROUP * GROUP;
  a.u8 = p->k.dtype == FLASHCPU_DTYPE_U8;
  return fc_splitkv_plan_args(env, plan, &a, sizeof a, tile, scratch_for_team);
}
