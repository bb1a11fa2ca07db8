/* f32/f16/bf16 split-KV decode micro-kernels for AVX-512, 1 to 64 rows;
 * the driver around them (tiles, splits, states, prefetch sweeps, merge)
 * is decode_splitkv_driver.inc, shared with AVX2 and NEON.
 *
 * Scores: for 4 keys x 4 slots, 16 accumulators stay in registers across
 * head_dim (q padded to 32, the tail of K masked in the loads, nothing
 * staged; quantized rows are dequantized in the loads, with the row's
 * scale and zero, except per-channel ones); a transpose/add tree sums all 16 at
 * once, and a 128-bit-lane transpose gives each slot its 16 scores in one
 * vector. bf16 rows are widened 32 elements at a time with one shift (even
 * elements) and one and (odd elements): q and the output accumulators are kept
 * in that even/odd order per 32 elements and put back in order when the partial
 * state is written. With bf16 q and K, where the kernel table chose them,
 * the scores come from VDPBF16PS on the raw rows instead
 * (decode_splitkv_bf16dot__avx512bf16.c, registry row
 * fc_decode_splitkv_bf16dot__avx512bf16). Softmax: the chunk's 4 slots go
 * through max, shift and sums as vectors (vector exp2, log2 domain), l
 * kept as 16 lanes per slot and summed once per split. Values: 64 output
 * columns of the chunk's 4 slots (16 registers) stay in registers across
 * the block's 16 V rows; the rescale by the softmax correction is folded
 * into their load. */
#include <math.h>
#include <string.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/decode/splitkv_softmax_avx512.h"
#include "kernels/kernel_support.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/quant_codes_avx512.h"
#include "simd/simd_avx512.h"

enum {
  KEY_BLOCK = FC_SPLITKV_KEY_BLOCK,
  CHUNK = FC_SPLITKV_CHUNK,
  KEYS_PER_GROUP = FC_SPLITKV_KEYS_PER_GROUP,
  PAIR = 32,
  PASS = 64
};
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* How the loads read a row: in order; bf16 in even/odd order per 32
 * elements; E4M3 codes of a block checked to hold no NaN code, widened
 * without the NaN step (the bits are the same for every other code); F8
 * codes before their scale (fc512_f8_span_unscaled), which then
 * multiplies each key's dot products and weights instead. */
enum { READ_PLAIN, READ_PAIRS, READ_E4M3_FINITE, READ_F8_UNSCALED };

static ALWAYS_INLINE __mmask16 lanes_of(int64_t remaining) {
  return remaining <= 0 ? 0 : fc512_tail_mask(remaining);
}

/* Lane masks for elements d .. d + 31 of a row of dim elements, made once
 * per pass so that the per-row loads carry no mask arithmetic. */
typedef struct span32 {
  __mmask32 pair_mask; /* bf16 even/odd loads: one 32-element load */
  __mmask16 lo, hi;    /* other dtypes: two 16-element loads */
} span32;

static ALWAYS_INLINE span32 span_of(int64_t d, int64_t dim) {
  const int64_t left = dim - d;
  span32 m;
  m.pair_mask = left >= 32 ? (__mmask32)0xffffffffu
                           : (__mmask32)(left <= 0 ? 0u : (1u << left) - 1u);
  m.lo = lanes_of(left);
  m.hi = lanes_of(left - 16);
  return m;
}

/* Bytes per element as the prefetch sweeps count them (Q8_0's block
 * scale, 2 bytes per 32, left out). */
static ALWAYS_INLINE int64_t element_bytes(flashcpu_dtype dtype) {
  if (dtype == FLASHCPU_DTYPE_F32) return 4;
  return fc_dtype_is_quantized(dtype) ? 1 : 2;
}

/* Elements d .. d + 31 of a row as two f32 vectors (elements past the
 * span's end zero): bf16 in even/odd order (lo: d, d + 2, ...; hi: d + 1,
 * d + 3, ...) with READ_PAIRS, else in order (lo: d .. d + 15, hi: d + 16
 * .. d + 31); quantized rows dequantized with the row's scale and zero. */
static ALWAYS_INLINE void load_span(const char *row, flashcpu_dtype dtype,
                                    int mode, int64_t d, span32 m, float scale,
                                    float zero, __m512 *lo, __m512 *hi) {
  if (mode == READ_F8_UNSCALED) {
    fc512_f8_span_unscaled(dtype, row, d, m.pair_mask, lo, hi);
    return;
  }
  if (mode == READ_E4M3_FINITE) {
    *lo = fc512_dequant_e4m3_finite(row, d, m.lo, scale);
    *hi = fc512_dequant_e4m3_finite(row, d + 16, m.hi, scale);
    return;
  }
  if (fc_dtype_is_quantized(dtype)) {
    *lo = fc512_dequant_lanes(dtype, row, d, m.lo, scale, zero);
    *hi = fc512_dequant_lanes(dtype, row, d + 16, m.hi, scale, zero);
    return;
  }
  if (mode == READ_PAIRS) {
    const __m512i raw =
        _mm512_maskz_loadu_epi16(m.pair_mask, (const uint16_t *)row + d);
    *lo = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    *hi = _mm512_castsi512_ps(
        _mm512_and_si512(raw, _mm512_set1_epi32((int)0xffff0000u)));
    return;
  }
  *lo = fc512_load(row, dtype, d, m.lo);
  *hi = fc512_load(row, dtype, d + 16, m.hi);
}

/* Scores of a chunk's 4 slots for a block's keys: scores[s] lane j is
 * q_s . k_j (lanes past n are garbage; k_rows past n repeat a valid row).
 * dim and dtype are constants in the specialised callers. */
static ALWAYS_INLINE void
chunk_scores(const fc_splitkv_rows *k_rows, flashcpu_dtype dtype, int mode,
             const float *q, int64_t padded_dim, int64_t dim, int64_t n,
             fc_prefetch_sweep *shared_sweep, __m512 scores[CHUNK]) {
  const int64_t size = element_bytes(dtype);
  const bool prefetch = shared_sweep != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared_sweep);
  __m512 groups[KEY_BLOCK / KEYS_PER_GROUP];
  for (int g = 0; g < KEY_BLOCK / KEYS_PER_GROUP; g++) {
    if (g * KEYS_PER_GROUP >= n) {
      groups[g] = _mm512_setzero_ps();
      continue;
    }
    /* acc[slot * 4 + key]: sum16 then puts slot s's 4 keys in lane s. */
    __m512 acc[CHUNK * KEYS_PER_GROUP];
    for (int i = 0; i < CHUNK * KEYS_PER_GROUP; i++)
      acc[i] = _mm512_setzero_ps();
    /* The group's rows and scales in locals, as the integer scores keep
     * theirs (decode_splitkv_i16dot__avx512vnni.c). */
    const char *rows[KEYS_PER_GROUP];
    float scales[KEYS_PER_GROUP], zeros[KEYS_PER_GROUP];
    for (int j = 0; j < KEYS_PER_GROUP; j++) {
      rows[j] = k_rows->row[g * KEYS_PER_GROUP + j];
      scales[j] = k_rows->scale[g * KEYS_PER_GROUP + j];
      zeros[j] = k_rows->zero[g * KEYS_PER_GROUP + j];
    }
#pragma GCC unroll 8
    for (int64_t d = 0; d < dim; d += PAIR) {
      __m512 lo[KEYS_PER_GROUP], hi[KEYS_PER_GROUP];
      for (int j = 0; j < KEYS_PER_GROUP; j++)
        load_span(rows[j], dtype, mode, d, span_of(d, dim), scales[j], zeros[j],
                  &lo[j], &hi[j]);
      /* a line per line the span starts: 1-byte rows every other span */
      if (prefetch && (d * size) % FC_SWEEP_LINE == 0)
        for (int j = 0; j < KEYS_PER_GROUP; j++) {
          fc_sweep_next(&sweep);
          if (PAIR * size > FC_SWEEP_LINE) fc_sweep_next(&sweep);
        }
      for (int s = 0; s < CHUNK; s++) {
        const __m512 q_lo = _mm512_loadu_ps(q + s * padded_dim + d);
        const __m512 q_hi = _mm512_loadu_ps(q + s * padded_dim + d + 16);
        for (int j = 0; j < KEYS_PER_GROUP; j++) {
          acc[s * KEYS_PER_GROUP + j] =
              _mm512_fmadd_ps(q_lo, lo[j], acc[s * KEYS_PER_GROUP + j]);
          acc[s * KEYS_PER_GROUP + j] =
              _mm512_fmadd_ps(q_hi, hi[j], acc[s * KEYS_PER_GROUP + j]);
        }
      }
    }
    groups[g] = fc512_sum16_by_lane(acc);
  }
  if (prefetch) *shared_sweep = sweep;
  fc512_transpose_128x4(groups, scores);
  for (int s = 0; s < CHUNK; s++) /* finite stays finite (common/score.h) */
    scores[s] = fc512_saturate(scores[s]);
}

/* The dtype cases of the dispatchers: every dtype its own copy. */
#define BY_EVERY_DTYPE(FOR, dim_value)                                         \
  switch (dtype) {                                                             \
  case FLASHCPU_DTYPE_F32:                                                     \
    FOR(FLASHCPU_DTYPE_F32, 0, dim_value);                                     \
    return;                                                                    \
  case FLASHCPU_DTYPE_F16:                                                     \
    FOR(FLASHCPU_DTYPE_F16, 0, dim_value);                                     \
    return;                                                                    \
  case FLASHCPU_DTYPE_I8:                                                      \
    FOR(FLASHCPU_DTYPE_I8, 0, dim_value);                                      \
    return;                                                                    \
  case FLASHCPU_DTYPE_U8:                                                      \
    FOR(FLASHCPU_DTYPE_U8, 0, dim_value);                                      \
    return;                                                                    \
  case FLASHCPU_DTYPE_F8_E4M3:                                                 \
    if (f8_unscaled)                                                           \
      FOR(FLASHCPU_DTYPE_F8_E4M3, READ_F8_UNSCALED, dim_value);                \
    else if (e4m3_finite)                                                      \
      FOR(FLASHCPU_DTYPE_F8_E4M3, READ_E4M3_FINITE, dim_value);                \
    else                                                                       \
      FOR(FLASHCPU_DTYPE_F8_E4M3, READ_PLAIN, dim_value);                      \
    return;                                                                    \
  case FLASHCPU_DTYPE_F8_E5M2:                                                 \
    if (f8_unscaled)                                                           \
      FOR(FLASHCPU_DTYPE_F8_E5M2, READ_F8_UNSCALED, dim_value);                \
    else                                                                       \
      FOR(FLASHCPU_DTYPE_F8_E5M2, READ_PLAIN, dim_value);                      \
    return;                                                                    \
  case FLASHCPU_DTYPE_Q8_0:                                                    \
    FOR(FLASHCPU_DTYPE_Q8_0, 0, dim_value);                                    \
    return;                                                                    \
  default:                                                                     \
    FOR(FLASHCPU_DTYPE_BF16, READ_PAIRS, dim_value);                           \
    return;                                                                    \
  }

/* Whether the block's rows are E4M3 with no NaN code (their fast path);
 * head_dim 128 gets a loop of constant length. */
static ALWAYS_INLINE int e4m3_block_finite(const fc_splitkv_rows *rows,
                                           flashcpu_dtype dtype, int64_t n,
                                           int64_t dim) {
  return dtype == FLASHCPU_DTYPE_F8_E4M3 &&
         (dim == 128 ? fc512_e4m3_rows_finite(rows->row, n, 128)
                     : fc512_e4m3_rows_finite(rows->row, n, dim));
}

/* Whether a block's F8 rows are read unscaled (READ_F8_UNSCALED): E5M2,
 * or E4M3 with no NaN code (e4m3_finite), each key's factor (its row's
 * scale times fc_f8_unscaled_factor) finite. */
static ALWAYS_INLINE int f8_unscaled_factor(const fc_splitkv_rows *rows,
                                            flashcpu_dtype dtype,
                                            int e4m3_finite, __m512 *factor) {
  if (dtype == FLASHCPU_DTYPE_F8_E4M3 ? !e4m3_finite
                                      : dtype != FLASHCPU_DTYPE_F8_E5M2)
    return 0;
  *factor = _mm512_mul_ps(_mm512_loadu_ps(rows->scale),
                          _mm512_set1_ps(fc_f8_unscaled_factor(dtype)));
  return _mm512_cmp_ps_mask(_mm512_abs_ps(*factor), _mm512_set1_ps(FLT_MAX),
                            _CMP_LE_OQ) == 0xffff;
}

/* head_dim 64 and 128 and each K dtype get their own unrolled copy. */
static void chunk_scores_by_dtype(const fc_splitkv_rows *k_rows,
                                  flashcpu_dtype dtype, int f8_unscaled,
                                  int e4m3_finite, const float *q,
                                  int64_t padded_dim, int64_t dim, int64_t n,
                                  fc_prefetch_sweep *sweep,
                                  __m512 scores[CHUNK]) {
#define SCORES_FOR(dt, mode, dim_value)                                        \
  chunk_scores(k_rows, dt, mode, q, padded_dim, dim_value, n, sweep, scores)
  if (dim == 128) BY_EVERY_DTYPE(SCORES_FOR, 128)
  if (dim == 64) BY_EVERY_DTYPE(SCORES_FOR, 64)
  BY_EVERY_DTYPE(SCORES_FOR, dim)
#undef SCORES_FOR
}

/* Unscaled F8 rows (where f8 allows them) take each key's factor after
 * the dot product. */
static void chunk_scores_dispatch(const fc_splitkv_rows *k_rows,
                                  flashcpu_dtype dtype, int f8, const float *q,
                                  int64_t padded_dim, int64_t dim, int64_t n,
                                  fc_prefetch_sweep *sweep,
                                  __m512 scores[CHUNK]) {
  const int e4m3_finite = e4m3_block_finite(k_rows, dtype, n, dim);
  __m512 factor;
  const int f8_unscaled =
      f8 && f8_unscaled_factor(k_rows, dtype, e4m3_finite, &factor);
  chunk_scores_by_dtype(k_rows, dtype, f8_unscaled, e4m3_finite, q, padded_dim,
                        dim, n, sweep, scores);
  for (int s = 0; f8_unscaled && s < CHUNK; s++)
    scores[s] = fc512_saturate(_mm512_mul_ps(scores[s], factor));
}

/* o[s] = alpha[s] * o[s] + sum_j w[s][j] * v_j over the block, for the
 * chunk's slots, 64 columns (4 slots x 4 vectors: 16 accumulators) at a
 * time in registers; columns past dv are zero and land in the padding.
 * Keys a slot does not see (seen[s] bit clear) never touch V: a hidden row
 * may hold anything, NaN included; that rarer case has its own loop so
 * that the common one carries no per-key masks. */
static ALWAYS_INLINE void
accumulate_values(const fc_splitkv_rows *v_rows, flashcpu_dtype dtype, int mode,
                  int64_t dv, int64_t padded_dv, int64_t n, float *o,
                  const float *weights, const float alpha[CHUNK],
                  const __mmask16 seen[CHUNK], int all_seen,
                  fc_prefetch_sweep *shared_sweep) {
  const int64_t size = element_bytes(dtype);
  const bool prefetch = shared_sweep != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared_sweep);
  for (int64_t d = 0; d < dv; d += PASS) {
    const span32 first = span_of(d, dv), second = span_of(d + PAIR, dv);
    __m512 acc[CHUNK][4];
    for (int s = 0; s < CHUNK; s++) {
      const __m512 factor = _mm512_set1_ps(alpha[s]);
      for (int x = 0; x < 4; x++)
        acc[s][x] = _mm512_mul_ps(
            _mm512_loadu_ps(o + s * padded_dv + d + 16 * x), factor);
    }
    if (all_seen) {
      for (int64_t j = 0; j < n; j++) {
        __m512 v[4];
        if (prefetch)
          for (int64_t line = 0; line < 2 * PAIR * size; line += FC_SWEEP_LINE)
            fc_sweep_next(&sweep);
        load_span(v_rows->row[j], dtype, mode, d, first, v_rows->scale[j],
                  v_rows->zero[j], &v[0], &v[1]);
        load_span(v_rows->row[j], dtype, mode, d + PAIR, second,
                  v_rows->scale[j], v_rows->zero[j], &v[2], &v[3]);
        for (int s = 0; s < CHUNK; s++) {
          const __m512 w = _mm512_set1_ps(weights[s * KEY_BLOCK + j]);
          for (int x = 0; x < 4; x++)
            acc[s][x] = _mm512_fmadd_ps(w, v[x], acc[s][x]);
        }
      }
    } else {
      const unsigned any = (unsigned)(seen[0] | seen[1] | seen[2] | seen[3]);
      for (int64_t j = 0; j < n; j++) {
        if (!((any >> j) & 1u)) continue;
        __m512 v[4];
        load_span(v_rows->row[j], dtype, mode, d, first, v_rows->scale[j],
                  v_rows->zero[j], &v[0], &v[1]);
        load_span(v_rows->row[j], dtype, mode, d + PAIR, second,
                  v_rows->scale[j], v_rows->zero[j], &v[2], &v[3]);
        for (int s = 0; s < CHUNK; s++) {
          const __mmask16 use =
              (__mmask16)(0u - (((unsigned)seen[s] >> j) & 1u));
          const __m512 w = _mm512_set1_ps(weights[s * KEY_BLOCK + j]);
          for (int x = 0; x < 4; x++)
            acc[s][x] = _mm512_mask3_fmadd_ps(w, v[x], acc[s][x], use);
        }
      }
    }
    for (int s = 0; s < CHUNK; s++)
      for (int x = 0; x < 4; x++)
        _mm512_storeu_ps(o + s * padded_dv + d + 16 * x, acc[s][x]);
  }
  if (prefetch) *shared_sweep = sweep;
}

static void accumulate_dispatch(const fc_splitkv_rows *v_rows,
                                flashcpu_dtype dtype, int f8, int64_t dv,
                                int64_t padded_dv, int64_t n, float *o,
                                const float *weights, const float alpha[CHUNK],
                                const __mmask16 seen[CHUNK],
                                fc_prefetch_sweep *sweep) {
  const __mmask16 lanes = fc512_tail_mask(n);
  const int e4m3_finite = e4m3_block_finite(v_rows, dtype, n, dv);
  /* Unscaled F8 rows: each key's factor goes into its weights. */
  __m512 factor;
  const int f8_unscaled =
      f8 && f8_unscaled_factor(v_rows, dtype, e4m3_finite, &factor);
  float scaled[CHUNK * KEY_BLOCK];
  for (int s = 0; f8_unscaled && s < CHUNK; s++)
    _mm512_storeu_ps(
        scaled + s * KEY_BLOCK,
        _mm512_mul_ps(_mm512_loadu_ps(weights + s * KEY_BLOCK), factor));
  if (f8_unscaled) weights = scaled;
  if (seen[0] == lanes && seen[1] == lanes && seen[2] == lanes &&
      seen[3] == lanes) {
#define VALUES_FOR(dt, mode, dim)                                              \
  accumulate_values(v_rows, dt, mode, dim, padded_dv, n, o, weights, alpha,    \
                    seen, 1, sweep)
    if (dv == 128) BY_EVERY_DTYPE(VALUES_FOR, 128)
    if (dv == 64) BY_EVERY_DTYPE(VALUES_FOR, 64)
    BY_EVERY_DTYPE(VALUES_FOR, dv)
  }
#undef VALUES_FOR
#define VALUES_FOR(dt, mode, dim)                                              \
  accumulate_values(v_rows, dt, mode, dim, padded_dv, n, o, weights, alpha,    \
                    seen, 0, NULL)
  BY_EVERY_DTYPE(VALUES_FOR, dv)
#undef VALUES_FOR
}
#undef BY_EVERY_DTYPE

/* The driver's hooks. */
enum {
  DS_PAIR = PAIR,
  DS_PASS = PASS,
  DS_L_FLOATS = KEY_BLOCK,
  DS_STAGES = 0,
  DS_READS_QUANTIZED = 1
};
#define DS_NAME(what) fc_splitkv_##what##__avx512

typedef struct ds_scores {
  __m512 slot[CHUNK]; /* slot s's 16 keys (lanes past n are garbage) */
} ds_scores;
typedef __mmask16 ds_seen;

static ALWAYS_INLINE void
ds_block_scores(const fc_splitkv_args *a, const fc_splitkv_rows *k_rows,
                const float *q, const fc_splitkv_int_q *int_q, int64_t n,
                fc_prefetch_sweep *sweep, float *buffer, ds_scores *scores) {
  if (int_q) {
    a->int_scores(k_rows, a->k_read, int_q, a->p->head_dim, n, sweep, buffer);
    for (int c = 0; c < CHUNK; c++)
      scores->slot[c] = _mm512_loadu_ps(buffer + c * KEY_BLOCK);
  } else if (a->bf16_scores) {
    a->bf16_scores(k_rows, a->k_read, (const uint16_t *)q, 2 * a->padded_dim,
                   a->p->head_dim, n, a->shared.q_factor, sweep, buffer);
    for (int c = 0; c < CHUNK; c++)
      scores->slot[c] = _mm512_loadu_ps(buffer + c * KEY_BLOCK);
  } else {
    chunk_scores_dispatch(k_rows, a->k_read, a->f8_unscaled, q, a->padded_dim,
                          a->p->head_dim, n, sweep, scores->slot);
  }
}

static ALWAYS_INLINE float *ds_scores_in_memory(ds_scores *scores,
                                                float *buffer) {
  for (int c = 0; c < CHUNK; c++)
    _mm512_storeu_ps(buffer + c * KEY_BLOCK, scores->slot[c]);
  return buffer;
}

static ALWAYS_INLINE void ds_scores_reload(ds_scores *scores,
                                           const float *memory) {
  for (int c = 0; c < CHUNK; c++)
    scores->slot[c] = _mm512_loadu_ps(memory + c * KEY_BLOCK);
}

static ALWAYS_INLINE void ds_softmax(ds_scores *scores, int64_t n, float *m,
                                     float *l, float *weights,
                                     float alpha[CHUNK], ds_seen seen[CHUNK]) {
  fc512_splitkv_softmax(scores->slot, n, m, l, weights, alpha, seen);
}

static ALWAYS_INLINE void ds_values(const fc_splitkv_args *a,
                                    const fc_splitkv_rows *v_rows, int64_t n,
                                    float *o, const float *weights,
                                    const float *alpha, const ds_seen *seen,
                                    fc_splitkv_int_values_fn int_values,
                                    fc_prefetch_sweep *sweep) {
  if (int_values) {
    const unsigned bits[CHUNK] = {seen[0], seen[1], seen[2], seen[3]};
    if (int_values(v_rows, a->v_read, a->p->v_head_dim, a->padded_dv, n, o,
                   weights, alpha, bits, sweep))
      return;
  }
  accumulate_dispatch(v_rows, a->v_read, a->f8_unscaled, a->p->v_head_dim,
                      a->padded_dv, n, o, weights, alpha, seen, sweep);
}

static ALWAYS_INLINE float ds_l_total(const float *l) {
  return _mm512_reduce_add_ps(_mm512_loadu_ps(l));
}

#include "kernels/decode/splitkv_pairs_avx512.h"
#define DS_STORE_ROW fc512_splitkv_store_row
#define DS_TO_PAIRS fc512_splitkv_q_to_pairs
#define DS_WRITE_STATE fc512_splitkv_write_state

#include "kernels/decode/decode_splitkv_driver.inc"

flashcpu_status fc_splitkv_plan_avx512(const fc_kernel_env *env,
                                       const fc_problem *p,
                                       fc_kernel_plan *plan,
                                       fc_splitkv_bf16_scores_fn bf16_scores) {
  return DS_NAME(plan)(env, p, plan, bf16_scores, NULL, NULL, 0);
}

flashcpu_status fc_splitkv_plan_avx512_int(const fc_kernel_env *env,
                                           const fc_problem *p,
                                           fc_kernel_plan *plan,
                                           fc_splitkv_int_scores_fn int_scores,
                                           fc_splitkv_int_values_fn int_values,
                                           int q_limit) {
  return DS_NAME(plan)(env, p, plan, NULL, int_scores, int_values, q_limit);
}

flashcpu_status fc_splitkv_plan_avx512_f8(const fc_kernel_env *env,
                                          const fc_problem *p,
                                          fc_kernel_plan *plan) {
  const flashcpu_status status =
      DS_NAME(plan)(env, p, plan, NULL, NULL, NULL, 0);
  /* The plan's state is the arguments, bound to each call as they are. */
  if (status == FLASHCPU_OK)
    ((fc_splitkv_args *)(void *)plan->state)->f8_unscaled = 1;
  return status;
}

flashcpu_status fc_decode_splitkv__avx512(const fc_kernel_env *env,
                                          const fc_problem *p,
                                          fc_kernel_plan *plan) {
  return DS_NAME(plan)(env, p, plan, NULL, NULL, NULL, 0);
}
