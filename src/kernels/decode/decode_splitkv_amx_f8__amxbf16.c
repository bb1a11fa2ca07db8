/* Split-KV decode of bf16 q on F8_E4M3 and F8_E5M2 K and V caches (one
 * scale per row) on AMX-BF16 tiles, for CPUs that have them (head_dim =
 * v_head_dim, a multiple of 32 up to 128): the tile products of the AMX
 * decode driver (splitkv_amx_driver.inc).
 *
 * The vector F8 kernel widens each code to f32 and does an FMA per
 * element and query head: on an Intel Xeon its instructions, not the
 * bytes, bound it. Every E4M3 and E5M2 value (subnormals, zero, inf and
 * NaN included) is exact in bf16, so here each 16-key block's codes are
 * widened to bf16 by two 128-entry byte tables (the value's high and low
 * byte, the sign ORed in), four shuffles and an OR per 64 codes, into a
 * staging block the tiles read; the row's scale multiplies the block's
 * scores and weights, not its elements.
 *   scores: as the bf16 AMX kernel's (K's staged block the A operand, q
 *      the B operand; q is bf16, exact), times the key's scale and
 *      q_factor; a block with a scale not finite is scored in f32;
 *   values: each weight times its row's scale, split exactly into bf16
 *      hi + lo + lo2 (8 bits each: the f32 weight), hi's products summed
 *      in rows 0..7 of an output tile and lo's and lo2's in rows 8..15
 *      (2^-8 of them: their rounding is lost), added at the end. The
 *      weights keep f32 accuracy for two more tile products per block.
 * A NaN or inf code or scale reaches the tiles' outputs; a unit whose
 * outputs are not all finite does not stand, and the driver computes its
 * values again in f32 (only the keys each slot sees counting). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype_convert.h"
#include "common/quant.h"
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
  GROUP = 64, /* keys per values step: the outputs stay in tiles over it */
  STEP = 32,  /* elements per tile row (64 bytes) */
  PACK = 4,   /* chunks whose scores share one product */
  COLUMNS = PACK * CHUNK,   /* slots of a scores tile */
  PLANE = 16 * COLUMNS * 2, /* q's B tile of a step: 16 pairs x 16 slots */
  HALF = 32,                /* keys of a weights tile (16 pairs) */
  W_ROWS = 3 * CHUNK,       /* weights and outputs: hi, lo, lo2 of 4 slots */
  CODES = 128,              /* table entries: the codes without the sign */
  W_BYTES = GROUP / HALF * W_ROWS * HALF * 2 /* a unit's weights tiles */
};
_Static_assert(CHUNK == 4 && BLOCK == 16, "tile shapes assume 4 x 16");

#define AMX_ELEMENT_BYTES 1
/* A skipped head's lines are swept as if read: the sweep keeps its pace. */
#define AMX_SWEEPS_SKIPPED_HEADS 1
/* A unit's outputs: W_ROWS rows of 16 per 16 columns (64 at a time). */
#define AMX_O_FLOATS(dim) (W_ROWS * ((dim) + 63) / 64 * 64)

/* A dtype's codes 0..127 as bf16 (low and high bytes), and the order
 * widen64 takes codes in. */
typedef struct f8_tables {
  uint8_t lo[CODES], hi[CODES], order[64];
} f8_tables;

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

static int64_t packs_of(int64_t per_head) {
  return (per_head + PACK - 1) / PACK;
}

static size_t plane_bytes(const amx_args *a, int team_size) {
  return (size_t)(a->shared.heads_per_tile *
                  packs_of((a->chunks + team_size - 1) / team_size) * a->steps *
                  PLANE) *
         sizeof(uint16_t);
}

/* Per unit u: o at u * AMX_O_FLOATS(dim) ([tile][W_ROWS][16]); planes
 * as the bf16 AMX kernel's; K's codes widened in k_stage ([key][dim]
 * bf16), V's in v_stage ([half][tile][16 key pairs][16 columns], two
 * keys' bf16 a dword). */
#define AMX_ARRAYS(X)                                                          \
  X(units, amx_unit, units * sizeof(amx_unit))                                 \
  X(o, float, units *AMX_O_FLOATS(dim) * sizeof(float))                        \
  X(p, float, units *CHUNK *keys * sizeof(float))                              \
  X(seen, uint16_t, units *CHUNK *keys / BLOCK * sizeof(uint16_t))             \
  X(planes, uint16_t, plane_bytes(a, team_size))                               \
  X(k_pack, char, BLOCK *dim)                                                  \
  X(k_stage, uint16_t, BLOCK *dim * sizeof(uint16_t))                          \
  X(v_stage, uint32_t, GROUP *((dim) + 63) / 64 * 64 * sizeof(uint16_t))       \
  /* [unit][GROUP / HALF][W_ROWS][HALF] bf16 */                                \
  X(weights, uint16_t, units *W_BYTES)                                         \
  X(score_sums, float, 2 * BLOCK * COLUMNS * sizeof(float))                    \
  /* a slot's o in column order */                                             \
  X(natural, float, dim * sizeof(float))

#include "kernels/decode/splitkv_amx_driver.inc"

static amx_shape amx_shape_of(const amx_args *a) {
  const amx_shape shape = {a->steps};
  return shape;
}

static void make_tables(flashcpu_dtype dtype, f8_tables *t) {
  for (int code = 0; code < CODES; code++) {
    const float value = fc_quant_code(dtype, (const char *)&(uint8_t){code}, 0);
    const uint32_t bits = fc_f32_bits(value) >> 16;
    t->lo[code] = (uint8_t)(bits & 0xffu);
    t->hi[code] = (uint8_t)(bits >> 8);
  }
  /* Byte 16 L + j of the codes reordered from code 8 L + j (j < 8) and
   * 32 + 8 L + j - 8 (j >= 8): the unpacks then give codes 0..31 and
   * 32..63 in order. */
  for (int at = 0; at < 64; at++) {
    const int lane = at / 16, j = at % 16;
    t->order[at] = (uint8_t)(j < 8 ? 8 * lane + j : 32 + 8 * lane + j - 8);
  }
}

/* The tables in registers. */
typedef struct f8_widen {
  __m512i lo0, lo1, hi0, hi1, order;
} f8_widen;

static ALWAYS_INLINE f8_widen widen_of(const f8_tables *t) {
  const f8_widen w = {_mm512_loadu_si512(t->lo), _mm512_loadu_si512(t->lo + 64),
                      _mm512_loadu_si512(t->hi), _mm512_loadu_si512(t->hi + 64),
                      _mm512_loadu_si512(t->order)};
  return w;
}

/* 64 codes (the last 32 zero where only 32 remain) to 2 x 32 bf16. */
static ALWAYS_INLINE void widen64(const f8_widen *w, __m512i codes,
                                  __m512i *first, __m512i *second) {
  const __m512i c = _mm512_permutexvar_epi8(w->order, codes);
  const __m512i lo = _mm512_permutex2var_epi8(w->lo0, c, w->lo1);
  __m512i hi = _mm512_permutex2var_epi8(w->hi0, c, w->hi1);
  hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8((char)0x80), 0xf8);
  *first = _mm512_unpacklo_epi8(lo, hi);
  *second = _mm512_unpackhi_epi8(lo, hi);
}

/* A row of dim codes to bf16. */
static ALWAYS_INLINE void widen_row(const f8_widen *w, const char *row,
                                    int64_t dim, uint16_t *out) {
  int64_t d = 0;
  for (; d + 64 <= dim; d += 64) {
    __m512i first, second;
    widen64(w, _mm512_loadu_si512(row + d), &first, &second);
    _mm512_storeu_si512(out + d, first);
    _mm512_storeu_si512(out + d + 32, second);
  }
  if (d < dim) {
    __m512i first, second;
    widen64(w, _mm512_maskz_loadu_epi8(0xffffffffu, row + d), &first, &second);
    _mm512_storeu_si512(out + d, first);
  }
}

/* Scores: 0/1 the sums of even/odd blocks (16 keys x 16 slots); 2..5
 * K's steps (16 keys x 32 elements); 6/7 q's planes of even/odd steps. */
static void configure_scores(void) {
  static const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  static const unsigned short bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* Values: 0..3 the outputs of 4 V tiles (W_ROWS x 16 columns); 4/5 the
 * weights of a group's halves (W_ROWS x 32 keys); 6/7 V's tiles (16 key
 * pairs x 16 columns). */
static void amx_configure_values(void) {
  static const unsigned char rows[8] = {W_ROWS, W_ROWS, W_ROWS, W_ROWS,
                                        W_ROWS, W_ROWS, 16,     16};
  static const unsigned short bytes[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  fc_amx_load_config(rows, bytes);
}

/* 16 bf16 values as f32. */
static ALWAYS_INLINE __m512 bf16x16(const uint16_t *at) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)at)), 16));
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
    const int64_t slot = unit->chunk * CHUNK + s;
    const uint16_t *q = unit->valid[s]
                            ? (const uint16_t *)fc_view_row(
                                  &p->q, t->b, slot / p->group,
                                  unit->kv_head * p->group + slot % p->group)
                            : NULL;
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
    const int64_t slot = unit->chunk * CHUNK + s;
    const uint16_t *q = unit->valid[s]
                            ? (const uint16_t *)fc_view_row(
                                  &p->q, t->b, slot / p->group,
                                  unit->kv_head * p->group + slot % p->group)
                            : NULL;
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
      for (int part = 0; part < 3; part++) {
        const __m512i row = (__m512i)_mm512_cvtne2ps_pbh(w[1], w[0]);
        _mm512_store_si512(tile + (CHUNK * part + s) * HALF, row);
        const __m512 first = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm512_castsi512_si256(row)), 16));
        const __m512 second = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(row, 1)), 16));
        w[0] = _mm512_sub_ps(w[0], first);
        w[1] = _mm512_sub_ps(w[1], second);
      }
    }
  }
}

/* Keys 2 r and 2 r + 1 of a group's half (rows a and b) into row r of its
 * V tiles: tile 4 m + q holds, per 64 columns m, columns 64 m + 16 L + 4 q
 * + i (L, i < 4) at dword 4 L + i, each dword the two keys' bf16. */
static ALWAYS_INLINE void widen_pair(const f8_widen *w, const char *row_a,
                                     const char *row_b, int64_t dim,
                                     uint32_t *tiles, int r) {
  const __m512i sign = _mm512_set1_epi8((char)0x80);
  for (int64_t m = 0; 64 * m < dim; m++) {
    const __mmask64 bytes = dim - 64 * m >= 64 ? ~(__mmask64)0 : 0xffffffffu;
    const __m512i a = _mm512_maskz_loadu_epi8(bytes, row_a + 64 * m);
    const __m512i b = _mm512_maskz_loadu_epi8(bytes, row_b + 64 * m);
    const __m512i la = _mm512_permutex2var_epi8(w->lo0, a, w->lo1);
    const __m512i lb = _mm512_permutex2var_epi8(w->lo0, b, w->lo1);
    const __m512i ha = _mm512_ternarylogic_epi32(
        _mm512_permutex2var_epi8(w->hi0, a, w->hi1), a, sign, 0xf8);
    const __m512i hb = _mm512_ternarylogic_epi32(
        _mm512_permutex2var_epi8(w->hi0, b, w->hi1), b, sign, 0xf8);
    const __m512i x0 = _mm512_unpacklo_epi8(la, ha);
    const __m512i x1 = _mm512_unpackhi_epi8(la, ha);
    const __m512i y0 = _mm512_unpacklo_epi8(lb, hb);
    const __m512i y1 = _mm512_unpackhi_epi8(lb, hb);
    uint32_t *at = tiles + (4 * m * BLOCK + r) * 16;
    _mm512_store_si512(at, _mm512_unpacklo_epi16(x0, y0));
    _mm512_store_si512(at + BLOCK * 16, _mm512_unpackhi_epi16(x0, y0));
    _mm512_store_si512(at + 2 * BLOCK * 16, _mm512_unpacklo_epi16(x1, y1));
    _mm512_store_si512(at + 3 * BLOCK * 16, _mm512_unpackhi_epi16(x1, y1));
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

static ALWAYS_INLINE bool unit_active(const amx_unit *unit) {
  return unit->active[0] || unit->active[1] || unit->active[2] ||
         unit->active[3];
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
