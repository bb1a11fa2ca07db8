/* f32/f16/bf16 split-KV decode (FlashDecoding) for AVX-512, 1 to 64 rows.
 *
 * Tile = (batch, group of kv heads, split). Its slots are the (query row,
 * group head) pairs of each kv head, in chunks of 4; the team's threads
 * share the chunks. Keys go in blocks of 16, and each block is run for
 * every kv head of the tile before the next: in a BSHD cache the heads of a
 * key are adjacent, so a tile of several heads reads memory in ascending
 * runs that the hardware prefetcher follows (one head alone reads 256 B
 * every kv_heads * head_dim elements, which it follows poorly). How many
 * heads a tile takes depends on the thread count, but never the math: each
 * (kv head, split) state is computed the same way, so the bytes never
 * depend on it.
 *
 * Scores: for 4 keys x 4 slots, 16 accumulators stay in registers across
 * head_dim; a transpose/add tree sums all 16 at once, and a 128-bit-lane
 * transpose gives each slot its 16 scores in one vector for the online
 * softmax (vector exp2, log2 domain). bf16 rows are widened 32 elements at
 * a time with one shift (even elements) and one and (odd elements): q and
 * the output accumulators are kept in that even/odd order per 32 elements
 * and put back in order when the partial state is written. With bf16 q and
 * K, where the kernel table chose them (AMD CPUs with AVX512-BF16 by
 * default), the scores come from VDPBF16PS on the raw rows instead
 * (splitkv_scores_avx512bf16.c, registry row
 * fc_decode_splitkv_bf16dot__avx512bf16). Values: 64 output columns of
 * the chunk's 4 slots (16 registers) stay in registers across the block's
 * 16 V rows; the rescale by the softmax correction is folded into their
 * load. Each K and V line read prefetches a line of the next key block,
 * walking that block's rows of the tile's heads in address order
 * (prefetch_sweep.h): prefetches spread evenly over the loads, addresses
 * ascending although the loads go head by head.
 *
 * Each tile writes a partial state (m, l, o) per slot to the call
 * workspace; each slot's splits are merged with the fixed tree of
 * kernels/merge (the code flashcpu_merge_states runs) and the rows written:
 * by a second launch, or, where a (batch, kv head) has few splits, in the
 * same launch by the thread that writes a head group's last partial state
 * (a counter per group), which saves the second launch's start and barrier
 * on short caches. Either way the tree is the same, so are the bytes.
 * Splits depend on the shape only. */
#include <math.h>
#include <string.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/decode/splitkv_scores.h"
#include "kernels/kernel_support.h"
#include "kernels/registry.h"
#include "simd/simd_avx512.h"

enum {
  KEY_BLOCK = FC_SPLITKV_KEY_BLOCK,
  CHUNK = FC_SPLITKV_CHUNK,
  KEYS_PER_GROUP = FC_SPLITKV_KEYS_PER_GROUP,
  PAIR = 32,
  PASS = 64
};
#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct splitkv_args {
  fc_splitkv_shared shared; /* plan, heads per tile, partial states */
  const fc_problem *p;
  const fc_row_to_f32_fn *row_to_f32;
  int64_t chunks;      /* ceil(slots / CHUNK) per kv head */
  int64_t padded_dim;  /* head_dim rounded up to 32: q rows are zero-padded */
  int64_t padded_dv;   /* v_head_dim rounded up to 64 */
  int k_pairs, v_pairs; /* bf16: even/odd order per 32 elements */
  /* bf16 q and K on a CPU with AVX512-BF16: scores by dot products on the
   * raw bf16 rows (q kept unscaled, q_factor applied to the sums). */
  fc_splitkv_bf16_scores_fn bf16_scores;
} splitkv_args;

/* One thread's chunks for every head of the tile: q, o, running m, l (16
 * lanes per slot), plus the block's weights. */
typedef struct chunk_state {
  float *q, *o, *m, *l, *weights;
  int64_t count; /* chunks per head this thread owns */
} chunk_state;

static int64_t chunks_of_rank(const splitkv_args *a, int team_size) {
  return (a->chunks + team_size - 1) / team_size;
}

static size_t floats_per_chunk(const splitkv_args *a) {
  return (size_t)(CHUNK * (a->padded_dim + a->padded_dv + 1 + KEY_BLOCK));
}

static size_t rank_floats(const splitkv_args *a, int team_size) {
  const int64_t chunks =
      chunks_of_rank(a, team_size) * a->shared.heads_per_tile;
  size_t floats = (size_t)chunks * floats_per_chunk(a) + CHUNK * KEY_BLOCK;
  return (floats + 15) & ~(size_t)15;
}

static size_t scratch_for_team(const void *opaque, int team_size) {
  return (size_t)team_size * rank_floats(opaque, team_size) * sizeof(float);
}

/* Slot i of the rank's list is chunk (i / CHUNK) % count of head
 * i / (CHUNK * count). */
static chunk_state carve(const splitkv_args *a, const fc_team_view *team) {
  float *base = (float *)team->scratch +
                (size_t)team->rank * rank_floats(a, team->size);
  chunk_state st;
  st.count = team->rank < a->chunks
                 ? (a->chunks - team->rank + team->size - 1) / team->size
                 : 0;
  int64_t all =
      chunks_of_rank(a, team->size) * a->shared.heads_per_tile * CHUNK;
  st.q = base;
  st.o = st.q + all * a->padded_dim;
  st.m = st.o + all * a->padded_dv;
  st.l = st.m + all;
  st.weights = st.l + all * KEY_BLOCK;
  return st;
}

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

/* Elements d .. d + 31 of a row as two f32 vectors (elements past the
 * span's end zero): bf16 in even/odd order (lo: d, d + 2, ...; hi: d + 1,
 * d + 3, ...) when pairs, else in order (lo: d .. d + 15, hi: d + 16 ..
 * d + 31). */
static ALWAYS_INLINE void load_span(const char *row, flashcpu_dtype dtype,
                                    int pairs, int64_t d, span32 m,
                                    __m512 *lo, __m512 *hi) {
  if (pairs) {
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
static ALWAYS_INLINE void chunk_scores(const char *const *k_rows,
                                       flashcpu_dtype dtype, int pairs,
                                       const float *q, int64_t padded_dim,
                                       int64_t dim, int64_t n,
                                       fc_prefetch_sweep *shared_sweep,
                                       __m512 scores[CHUNK]) {
  const int64_t size = dtype == FLASHCPU_DTYPE_F32 ? 4 : 2;
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
    for (int64_t d = 0; d < dim; d += PAIR) {
      __m512 lo[KEYS_PER_GROUP], hi[KEYS_PER_GROUP];
      for (int j = 0; j < KEYS_PER_GROUP; j++) {
        const char *row = k_rows[g * KEYS_PER_GROUP + j];
        if (prefetch) {
          fc_sweep_next(&sweep);
          if (PAIR * size > FC_SWEEP_LINE) fc_sweep_next(&sweep);
        }
        load_span(row, dtype, pairs, d, span_of(d, dim), &lo[j], &hi[j]);
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
    groups[g] = fc_splitkv_sum16(acc);
  }
  if (prefetch) *shared_sweep = sweep;
  fc_splitkv_transpose_groups(groups, scores);
}

/* head_dim 64 and 128 and each K dtype get their own unrolled copy. */
static void chunk_scores_dispatch(const char *const *k_rows,
                                  flashcpu_dtype dtype, const float *q,
                                  int64_t padded_dim, int64_t dim, int64_t n,
                                  fc_prefetch_sweep *sweep,
                                  __m512 scores[CHUNK]) {
#define SCORES_FOR(dt, pairs, dim_value)                                       \
  chunk_scores(k_rows, dt, pairs, q, padded_dim, dim_value, n, sweep, scores)
#define BY_DTYPE(dim_value)                                                    \
  switch (dtype) {                                                             \
  case FLASHCPU_DTYPE_F32:                                                     \
    SCORES_FOR(FLASHCPU_DTYPE_F32, 0, dim_value);                              \
    return;                                                                    \
  case FLASHCPU_DTYPE_F16:                                                     \
    SCORES_FOR(FLASHCPU_DTYPE_F16, 0, dim_value);                              \
    return;                                                                    \
  default: SCORES_FOR(FLASHCPU_DTYPE_BF16, 1, dim_value); return;              \
  }
  if (dim == 128) BY_DTYPE(128)
  if (dim == 64) BY_DTYPE(64)
  BY_DTYPE(dim)
#undef BY_DTYPE
#undef SCORES_FOR
}

/* Slot s's largest score (lanes of masked[s]) in lane s of every 128-bit
 * lane: a transpose/max tree, no scalar reductions. */
static ALWAYS_INLINE __m512 block_max4(const __m512 masked[CHUNK]) {
  const __m512 t0 = _mm512_max_ps(_mm512_unpacklo_ps(masked[0], masked[1]),
                                  _mm512_unpackhi_ps(masked[0], masked[1]));
  const __m512 t1 = _mm512_max_ps(_mm512_unpacklo_ps(masked[2], masked[3]),
                                  _mm512_unpackhi_ps(masked[2], masked[3]));
  __m512 u = _mm512_max_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0),
                                          _mm512_castps_pd(t1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0),
                                          _mm512_castps_pd(t1))));
  u = _mm512_max_ps(u, _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_max_ps(u,
                       _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Lane s of every 128-bit lane of v, in all 16 lanes. */
#define SLOT_LANE(v, s) _mm512_permute_ps((v), _MM_SHUFFLE(s, s, s, s))

/* Online softmax of a chunk's block: scores become weights (0 for hidden
 * keys and lanes past n) in weights[slot * 16 + key]; alpha[slot] is the
 * factor the slot's output must be rescaled by (exactly 1 where the running
 * max did not move). seen[slot]: the keys the slot sees, as a lane mask.
 * The 4 slots go through the max, the shift and the sums as vectors. A
 * NaN score (max_ps may drop it from the max) gives a NaN weight, so the
 * slot's sum and output become NaN all the same. */
static ALWAYS_INLINE void softmax_chunk(const __m512 scores[CHUNK], int64_t n,
                                        float *m, float *l, float *weights,
                                        float alpha[CHUNK],
                                        __mmask16 seen[CHUNK]) {
  const __mmask16 lanes = fc512_tail_mask(n);
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
  __m512 masked[CHUNK];
  __mmask16 any_seen = 0;
  for (int c = 0; c < CHUNK; c++) {
    masked[c] = _mm512_mask_mov_ps(minus_inf, lanes, scores[c]);
    seen[c] = _mm512_cmp_ps_mask(masked[c], minus_inf, _CMP_NEQ_UQ) & lanes;
    any_seen |= (__mmask16)((seen[c] != 0) << c);
  }
  /* Lanes 0..3 of each 128-bit lane: the slots' running max, old and new.
   * A slot that saw nothing keeps its state: shift 0, alpha exactly 1. */
  const __m512 m_old = _mm512_broadcast_f32x4(_mm_loadu_ps(m));
  const __m512 m_new = _mm512_max_ps(m_old, block_max4(masked));
  const __mmask16 moved = (__mmask16)(any_seen * 0x1111u);
  const __m512 factor = fc512_exp2(_mm512_maskz_sub_ps(moved, m_old, m_new));
  _mm_storeu_ps(alpha, _mm512_castps512_ps128(factor));
  _mm_storeu_ps(m, _mm512_castps512_ps128(m_new));
#define SLOT_WEIGHTS(c)                                                        \
  do {                                                                         \
    const __m512 w = _mm512_maskz_mov_ps(                                      \
        seen[c], fc512_exp2(_mm512_sub_ps(masked[c], SLOT_LANE(m_new, c))));  \
    const __m512 sums = _mm512_loadu_ps(l + c * KEY_BLOCK);                    \
    _mm512_storeu_ps(l + c * KEY_BLOCK,                                        \
                     _mm512_fmadd_ps(sums, SLOT_LANE(factor, c), w));          \
    _mm512_storeu_ps(weights + c * KEY_BLOCK, w);                              \
  } while (0)
  SLOT_WEIGHTS(0);
  SLOT_WEIGHTS(1);
  SLOT_WEIGHTS(2);
  SLOT_WEIGHTS(3);
#undef SLOT_WEIGHTS
}

/* o[s] = alpha[s] * o[s] + sum_j w[s][j] * v_j over the block, for the
 * chunk's slots, 64 columns (4 slots x 4 vectors: 16 accumulators) at a
 * time in registers; columns past dv are zero and land in the padding.
 * Keys a slot does not see (seen[s] bit clear) never touch V: a hidden row
 * may hold anything, NaN included; that rarer case has its own loop so
 * that the common one carries no per-key masks. */
static ALWAYS_INLINE void accumulate_values(const char *const *v_rows,
                                            flashcpu_dtype dtype, int pairs,
                                            int64_t dv, int64_t padded_dv,
                                            int64_t n, float *o,
                                            const float *weights,
                                            const float alpha[CHUNK],
                                            const __mmask16 seen[CHUNK],
                                            int all_seen,
                                            fc_prefetch_sweep *shared_sweep) {
  const int64_t size = dtype == FLASHCPU_DTYPE_F32 ? 4 : 2;
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
        load_span(v_rows[j], dtype, pairs, d, first, &v[0], &v[1]);
        load_span(v_rows[j], dtype, pairs, d + PAIR, second, &v[2], &v[3]);
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
        load_span(v_rows[j], dtype, pairs, d, first, &v[0], &v[1]);
        load_span(v_rows[j], dtype, pairs, d + PAIR, second, &v[2], &v[3]);
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

static void accumulate_dispatch(const char *const *v_rows,
                                flashcpu_dtype dtype, int64_t dv,
                                int64_t padded_dv, int64_t n, float *o,
                                const float *weights, const float alpha[CHUNK],
                                const __mmask16 seen[CHUNK],
                                fc_prefetch_sweep *sweep) {
  const __mmask16 lanes = fc512_tail_mask(n);
  if (seen[0] == lanes && seen[1] == lanes && seen[2] == lanes &&
      seen[3] == lanes) {
#define VALUES_FOR(dt, pairs, dim)                                             \
  accumulate_values(v_rows, dt, pairs, dim, padded_dv, n, o, weights, alpha,   \
                    seen, 1, sweep)
#define BY_DTYPE(dim_value)                                                    \
  switch (dtype) {                                                             \
  case FLASHCPU_DTYPE_F32:                                                     \
    VALUES_FOR(FLASHCPU_DTYPE_F32, 0, dim_value);                              \
    return;                                                                    \
  case FLASHCPU_DTYPE_F16:                                                     \
    VALUES_FOR(FLASHCPU_DTYPE_F16, 0, dim_value);                              \
    return;                                                                    \
  default: VALUES_FOR(FLASHCPU_DTYPE_BF16, 1, dim_value); return;              \
  }
    if (dv == 128) BY_DTYPE(128)
    if (dv == 64) BY_DTYPE(64)
    BY_DTYPE(dv)
  }
#undef VALUES_FOR
#define VALUES_FOR(dt, pairs, dim)                                             \
  accumulate_values(v_rows, dt, pairs, dim, padded_dv, n, o, weights, alpha,   \
                    seen, 0, NULL)
  BY_DTYPE(dv)
#undef BY_DTYPE
#undef VALUES_FOR
}

static void init_chunks(const splitkv_args *a, const chunk_state *st,
                        int64_t b, int64_t h0, const fc_team_view *team) {
  const fc_problem *p = a->p;
  const int64_t D = p->head_dim, PD = a->padded_dim;
  for (int64_t h = 0; h < a->shared.heads_per_tile; h++) {
    const int64_t kv_head = h0 + h;
    for (int64_t mine = 0; mine < st->count; mine++) {
      const int64_t chunk = team->rank + mine * team->size;
      for (int s = 0; s < CHUNK; s++) {
        const int64_t slot = chunk * CHUNK + s;
        const int64_t i = (h * st->count + mine) * CHUNK + s;
        float *q = st->q + i * PD;
        memset(q, 0, (size_t)PD * sizeof(float));
        if (slot < a->shared.plan.slots) {
          const char *row = fc_view_row(&p->q, b, slot / p->group,
                                        kv_head * p->group + slot % p->group);
          if (a->bf16_scores)
            memcpy(q, row, (size_t)D * sizeof(uint16_t));
          else
            a->row_to_f32[p->q.dtype](row, D, a->shared.q_factor, q);
          if (a->k_pairs) fc_splitkv_to_pairs(q, PD, PAIR);
        }
        memset(st->o + i * a->padded_dv, 0,
               (size_t)a->padded_dv * sizeof(float));
        memset(st->l + i * KEY_BLOCK, 0, KEY_BLOCK * sizeof(float));
        st->m[i] = -INFINITY;
      }
    }
  }
}

/* One kv head's block: every chunk of this thread. The first chunk's
 * loads advance the sweeps of the next block (NULL: none). */
static void head_block(const splitkv_args *a, const chunk_state *st,
                       const fc_team_view *team, int64_t b, int64_t kv_head,
                       int64_t h, int64_t j0, int64_t n, int64_t kv_length,
                       fc_prefetch_sweep *k_sweep, fc_prefetch_sweep *v_sweep) {
  const fc_problem *p = a->p;
  const int64_t D = p->head_dim, Dv = p->v_head_dim;
  const char *k_rows[KEY_BLOCK], *v_rows[KEY_BLOCK];
  const char *k0 = fc_view_row(&p->k, b, j0, kv_head);
  const char *v0 = fc_view_row(&p->v, b, j0, kv_head);
  const int64_t k_step = p->k.strides[1] * p->k.element_size;
  const int64_t v_step = p->v.strides[1] * p->v.element_size;
  /* Rows past n repeat the last (the loads stay in bounds). */
  const char *k = k0, *v = v0;
  for (int64_t j = 0; j < KEY_BLOCK; j++) {
    k_rows[j] = k;
    v_rows[j] = v;
    if (j + 1 < n) {
      k += k_step;
      v += v_step;
    }
  }
  for (int64_t mine = 0; mine < st->count; mine++) {
    const int64_t chunk = team->rank + mine * team->size;
    const int64_t i0 = (h * st->count + mine) * CHUNK;
    /* One chunk per thread advances the sweeps: they cover the block once. */
    const bool advances = mine == 0;
    __m512 scores[CHUNK];
    if (a->bf16_scores) {
      float s[CHUNK * KEY_BLOCK];
      a->bf16_scores(k_rows, (const uint16_t *)(st->q + i0 * a->padded_dim),
                     2 * a->padded_dim, D, n, a->shared.q_factor,
                     advances ? k_sweep : NULL, s);
      for (int c = 0; c < CHUNK; c++)
        scores[c] = _mm512_loadu_ps(s + c * KEY_BLOCK);
    } else {
      chunk_scores_dispatch(k_rows, p->k.dtype, st->q + i0 * a->padded_dim,
                            a->padded_dim, D, n,
                            advances ? k_sweep : NULL, scores);
    }
    if (a->shared.needs_finish) {
      float s[CHUNK * KEY_BLOCK];
      for (int c = 0; c < CHUNK; c++) {
        _mm512_storeu_ps(s + c * KEY_BLOCK, scores[c]);
        fc_splitkv_finish(&a->shared, s + c * KEY_BLOCK, b, kv_head,
                          chunk * CHUNK + c, j0, n, kv_length);
        scores[c] = _mm512_loadu_ps(s + c * KEY_BLOCK);
      }
    }
    __mmask16 seen[CHUNK];
    float alpha[CHUNK];
    softmax_chunk(scores, n, st->m + i0, st->l + i0 * KEY_BLOCK, st->weights,
                  alpha, seen);
    if (seen[0] | seen[1] | seen[2] | seen[3])
      accumulate_dispatch(v_rows, p->v.dtype, Dv, a->padded_dv, n,
                          st->o + i0 * a->padded_dv, st->weights, alpha,
                          seen, advances ? v_sweep : NULL);
  }
}

static void splitkv_tile(void *opaque, int64_t tile,
                         const fc_team_view *team) {
  const splitkv_args *a = opaque;
  const fc_problem *p = a->p;
  const fc_splitkv_tile t = fc_splitkv_locate(&a->shared, tile);
  const int64_t b = t.b, h0 = t.h0, begin = t.begin, end = t.end;
  const int64_t Dv = p->v_head_dim;
  const chunk_state st = carve(a, team);

  if (begin < end) init_chunks(a, &st, b, h0, team);
  const int64_t hpt = a->shared.heads_per_tile;
  if (begin < end) {
    fc_prefetch_sweep first_k, first_v;
    fc_splitkv_block_sweeps(&a->shared, b, h0, begin, end, &first_k,
                            &first_v);
    fc_sweep_all(&first_k);
    fc_sweep_all(&first_v);
  }
  for (int64_t j0 = begin; j0 < end; j0 += KEY_BLOCK) {
    const int64_t n = end - j0 < KEY_BLOCK ? end - j0 : KEY_BLOCK;
    /* The next block's rows of the tile's heads, empty after the last. */
    fc_prefetch_sweep k_sweep, v_sweep;
    fc_splitkv_block_sweeps(&a->shared, b, h0, j0 + KEY_BLOCK, end, &k_sweep,
                            &v_sweep);
    for (int64_t h = 0; h < hpt; h++)
      head_block(a, &st, team, b, h0 + h, h, j0, n, t.kv_length, &k_sweep,
                 &v_sweep);
  }

  /* Partial states of this split; an empty one is m = -inf only. */
  int written = 0;
  for (int64_t h = 0; h < hpt; h++) {
    const int64_t bk = b * p->kv_heads + h0 + h;
    for (int64_t mine = 0; mine < st.count; mine++) {
      const int64_t chunk = team->rank + mine * team->size;
      for (int c = 0; c < CHUNK; c++) {
        const int64_t slot = chunk * CHUNK + c;
        const int64_t i = (h * st.count + mine) * CHUNK + c;
        if (slot >= a->shared.plan.slots) break;
        float *record = fc_splitkv_record(&a->shared, bk, t.split, slot);
        written++;
        if (begin >= end || st.m[i] == -INFINITY) {
          fc_splitkv_write_state(record, -INFINITY, 0.0f, NULL, Dv, 0);
          continue;
        }
        fc_splitkv_write_state(
            record, st.m[i],
            _mm512_reduce_add_ps(_mm512_loadu_ps(st.l + i * KEY_BLOCK)),
            st.o + i * a->padded_dv, Dv, a->v_pairs ? PAIR : 0);
      }
    }
  }
  fc_splitkv_tile_written(&a->shared, &t, written);
}

flashcpu_status fc_splitkv_run_avx512(const fc_kernel_env *env,
                                      const fc_problem *p,
                                      fc_splitkv_bf16_scores_fn bf16_scores) {
  splitkv_args a;
  memset(&a, 0, sizeof a);
  fc_splitkv_shared_init(&a.shared, p, env->settings);
  a.p = p;
  a.row_to_f32 = env->row_to_f32;
  a.chunks = (a.shared.plan.slots + CHUNK - 1) / CHUNK;
  a.padded_dim = (p->head_dim + PAIR - 1) / PAIR * PAIR;
  a.padded_dv = (p->v_head_dim + PASS - 1) / PASS * PASS;
  if (bf16_scores && p->q.dtype == FLASHCPU_DTYPE_BF16 &&
      p->k.dtype == FLASHCPU_DTYPE_BF16)
    a.bf16_scores = bf16_scores;
  a.k_pairs = p->k.dtype == FLASHCPU_DTYPE_BF16 && !a.bf16_scores;
  a.v_pairs = p->v.dtype == FLASHCPU_DTYPE_BF16;
  /* Prefetch: the next block, into L2 (prefetch_sweep.h); 2 blocks ahead
   * was no faster. */
  return fc_splitkv_run(env, &a.shared, splitkv_tile, &a, scratch_for_team);
}

flashcpu_status fc_decode_splitkv__avx512(const fc_kernel_env *env,
                                          const fc_problem *p) {
  return fc_splitkv_run_avx512(env, p, NULL);
}
