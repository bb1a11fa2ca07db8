/* f32/f16/bf16 split-KV decode (FlashDecoding) for AVX-512, 1 to 64 rows.
 *
 * Tile = (batch, kv head, split). Its slots are the (query row, group head)
 * pairs, in chunks of 4; the team's threads share the chunks. Keys go in
 * blocks of 16. Scores: for 4 keys x 4 slots, 16 accumulators stay in
 * registers across head_dim; a transpose/add tree sums all 16 at once (no
 * horizontal sum per key and head), and a 128-bit-lane transpose gives each
 * slot its 16 scores in one vector for the online softmax (vector exp2, log2
 * domain). Values: each 16-lane slice of the chunk's 4 outputs stays in
 * registers across the block's 16 V rows. The block's K/V rows (a few KiB)
 * stay in L1 while every chunk uses them, so each row comes from memory once
 * for all rows and heads of the group. K and V rows of the next block are
 * prefetched: they are kv_heads * head_dim apart, a stride the hardware
 * prefetcher follows poorly.
 *
 * Each tile writes a partial state (m, l, o) per slot to the call
 * workspace; a second launch merges each slot's splits with the fixed tree
 * of kernels/merge (the code flashcpu_merge_states runs) and writes the
 * rows. Splits depend on the shape only, so the bytes never depend on the
 * thread count. */
#include <math.h>
#include <string.h>

#include "api/errors.h"
#include "common/mask.h"
#include "dispatch/kernel_table.h"
#include "kernels/decode/decode_splitkv.h"
#include "kernels/kernel_support.h"
#include "kernels/merge/merge_states.h"
#include "simd/simd_avx512.h"

enum { KEY_BLOCK = 16, CHUNK = 4, KEYS_PER_GROUP = 4 };

#define LOG2E_F 1.44269504088896340736f
#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct splitkv_args {
  const fc_problem *p;
  const fc_kernel_table *table;
  fc_splitkv_plan plan;
  int64_t chunks;      /* ceil(slots / CHUNK) */
  int64_t padded_dim;  /* head_dim rounded up to 16: q rows are zero-padded */
  float q_factor;
  int scores_final;    /* no softcap or additive mask: Q carries log2(e) */
  int needs_finish;    /* some score needs per-key work after the dot */
  float *partials;     /* [batch][kv head][split][slot] state records */
} splitkv_args;

/* One thread's chunks: q, o, running m, l (16 lanes per slot), plus the
 * block's weights. */
typedef struct chunk_state {
  float *q, *o, *m, *l, *weights;
  int64_t count; /* chunks this thread owns */
} chunk_state;

static int64_t chunks_of_rank(const splitkv_args *a, int team_size) {
  return (a->chunks + team_size - 1) / team_size;
}

static size_t floats_per_chunk(const splitkv_args *a) {
  return (size_t)(CHUNK * (a->padded_dim + a->p->v_head_dim + 1 + KEY_BLOCK));
}

static size_t rank_floats(const splitkv_args *a, int team_size) {
  size_t floats = (size_t)chunks_of_rank(a, team_size) * floats_per_chunk(a) +
                  CHUNK * KEY_BLOCK;
  return (floats + 15) & ~(size_t)15;
}

static size_t scratch_for_team(const void *opaque, int team_size) {
  return (size_t)team_size * rank_floats(opaque, team_size) * sizeof(float);
}

static chunk_state carve(const splitkv_args *a, const fc_team_view *team) {
  float *base = (float *)team->scratch +
                (size_t)team->rank * rank_floats(a, team->size);
  chunk_state st;
  st.count = team->rank < a->chunks
                 ? (a->chunks - team->rank + team->size - 1) / team->size
                 : 0;
  int64_t all = chunks_of_rank(a, team->size) * CHUNK;
  st.q = base;
  st.o = st.q + all * a->padded_dim;
  st.m = st.o + all * a->p->v_head_dim;
  st.l = st.m + all;
  st.weights = st.l + all * KEY_BLOCK;
  return st;
}

/* Lane i of the result is the sum of the 16 lanes of v[i]. */
static ALWAYS_INLINE __m512 sum16(const __m512 v[16]) {
  __m512 pairs[8], quads[4], halves[2];
  for (int i = 0; i < 8; i++)
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; i++) {
    __m512d x = _mm512_castps_pd(pairs[2 * i]);
    __m512d y = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  for (int i = 0; i < 2; i++)
    halves[i] = _mm512_add_ps(
        _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1],
                             _MM_SHUFFLE(2, 0, 2, 0)),
        _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1],
                             _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(
      _mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
      _mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Scores of a chunk's 4 slots for a block's keys: scores[s] lane j is
 * q_s . k_j (lanes past n are garbage; k_rows past n repeat a valid row).
 * dim and dtype are constants in the specialised callers. */
static ALWAYS_INLINE void chunk_scores(const char *const *k_rows,
                                       flashcpu_dtype dtype, const float *q,
                                       int64_t padded_dim, int64_t dim,
                                       int64_t n, __m512 scores[CHUNK]) {
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
    for (int64_t d = 0; d < dim; d += 16) {
      __mmask16 mask = fc512_tail_mask(dim - d);
      __m512 k[KEYS_PER_GROUP];
      for (int j = 0; j < KEYS_PER_GROUP; j++)
        k[j] = fc512_load(k_rows[g * KEYS_PER_GROUP + j], dtype, d, mask);
      for (int s = 0; s < CHUNK; s++) {
        __m512 qv = _mm512_loadu_ps(q + s * padded_dim + d);
        for (int j = 0; j < KEYS_PER_GROUP; j++)
          acc[s * KEYS_PER_GROUP + j] =
              _mm512_fmadd_ps(qv, k[j], acc[s * KEYS_PER_GROUP + j]);
      }
    }
    groups[g] = sum16(acc);
  }
  /* groups[g] holds slot s's keys 4g..4g+3 in 128-bit lane s: transpose. */
  __m512 low01 = _mm512_shuffle_f32x4(groups[0], groups[1],
                                      _MM_SHUFFLE(1, 0, 1, 0));
  __m512 low23 = _mm512_shuffle_f32x4(groups[2], groups[3],
                                      _MM_SHUFFLE(1, 0, 1, 0));
  __m512 high01 = _mm512_shuffle_f32x4(groups[0], groups[1],
                                       _MM_SHUFFLE(3, 2, 3, 2));
  __m512 high23 = _mm512_shuffle_f32x4(groups[2], groups[3],
                                       _MM_SHUFFLE(3, 2, 3, 2));
  scores[0] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(2, 0, 2, 0));
  scores[1] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(3, 1, 3, 1));
  scores[2] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(2, 0, 2, 0));
  scores[3] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(3, 1, 3, 1));
}

#define SCORES_FOR(dtype, dim)                                                 \
  chunk_scores(k_rows, dtype, q, padded_dim, dim, n, scores)

/* head_dim 64 and 128 and each K dtype get their own unrolled copy. */
static void chunk_scores_dispatch(const char *const *k_rows,
                                  flashcpu_dtype dtype, const float *q,
                                  int64_t padded_dim, int64_t dim, int64_t n,
                                  __m512 scores[CHUNK]) {
#define BY_DTYPE(dim_value)                                                    \
  switch (dtype) {                                                             \
  case FLASHCPU_DTYPE_F32: SCORES_FOR(FLASHCPU_DTYPE_F32, dim_value); return;  \
  case FLASHCPU_DTYPE_F16: SCORES_FOR(FLASHCPU_DTYPE_F16, dim_value); return;  \
  default: SCORES_FOR(FLASHCPU_DTYPE_BF16, dim_value); return;                 \
  }
  if (dim == 128) BY_DTYPE(128)
  if (dim == 64) BY_DTYPE(64)
  BY_DTYPE(dim)
#undef BY_DTYPE
}

/* Per-key work the dot product does not do: the row's key range (rows of a
 * multi-row tile see different keys), softcap, additive mask, tree bits. */
static void finish_scores(const splitkv_args *a, float *s, int64_t b,
                          int64_t kv_head, int64_t slot, int64_t j0,
                          int64_t n, int64_t kv_length) {
  const fc_problem *p = a->p;
  if (slot >= a->plan.slots) { /* padding slot: sees nothing */
    for (int64_t j = 0; j < n; j++) s[j] = -INFINITY;
    return;
  }
  const int64_t row = slot / p->group;
  const int64_t head = kv_head * p->group + slot % p->group;
  const fc_key_range range = fc_row_key_range(p, kv_length, row);
  const int64_t tree_begin = fc_tree_begin(p, kv_length);
  const float *mask_row =
      p->additive ? p->additive->data + b * p->additive->strides[0] +
                        head * p->additive->strides[1] +
                        row * p->additive->strides[2]
                  : NULL;
  for (int64_t j = 0; j < n; j++) {
    const int64_t key = j0 + j;
    if (key < range.begin || key >= range.end) {
      s[j] = -INFINITY;
      continue;
    }
    if (!a->scores_final) {
      float mask = mask_row ? mask_row[key * p->additive->strides[3]] : 0.0f;
      float score = s[j];
      if (p->softcap > 0.0f) score = p->softcap * tanhf(score / p->softcap);
      s[j] = mask == -INFINITY ? -INFINITY : (score + mask) * LOG2E_F;
    }
    if (key >= tree_begin && !fc_tree_allows(p, b, row, key, tree_begin))
      s[j] = -INFINITY;
  }
}

static void scale_output(float *o, int64_t dv, float alpha) {
  __m512 factor = _mm512_set1_ps(alpha);
  for (int64_t d = 0; d < dv; d += 16) {
    __mmask16 mask = fc512_tail_mask(dv - d);
    _mm512_mask_storeu_ps(
        o + d, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, o + d), factor));
  }
}

/* Online softmax of one slot's block: scores become weights (0 for hidden
 * keys and lanes past n). Returns the keys the slot sees as a lane mask. */
static __mmask16 softmax_block(__m512 scores, int64_t n, float *m, float *l,
                               float *o, int64_t dv, float *weights) {
  const __mmask16 lanes = fc512_tail_mask(n);
  scores = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), lanes, scores);
  const __mmask16 seen =
      _mm512_cmp_ps_mask(scores, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ) &
      lanes;
  if (!seen) return 0;
  float block_max = _mm512_reduce_max_ps(scores);
  if (_mm512_cmp_ps_mask(scores, scores, _CMP_UNORD_Q)) block_max = NAN;
  const float m_new = (block_max > *m || isnan(block_max)) ? block_max : *m;
  const float alpha = exp2f(*m - m_new);
  __m512 w = fc512_exp2(_mm512_sub_ps(scores, _mm512_set1_ps(m_new)));
  w = _mm512_maskz_mov_ps(seen, w);
  __m512 sums = _mm512_loadu_ps(l);
  if (alpha != 1.0f) {
    sums = _mm512_mul_ps(sums, _mm512_set1_ps(alpha));
    scale_output(o, dv, alpha);
  }
  _mm512_storeu_ps(l, _mm512_add_ps(sums, w));
  _mm512_storeu_ps(weights, w);
  *m = m_new;
  return seen;
}

/* o[s] += w[s][j] * v_j over the block, for the chunk's slots. Keys a slot
 * does not see (seen[s] bit clear) never touch V: a hidden row may hold
 * anything, NaN included. */
static ALWAYS_INLINE void accumulate_values(const char *const *v_rows,
                                            flashcpu_dtype dtype, int64_t dv,
                                            int64_t n, float *o,
                                            const float *weights,
                                            const __mmask16 seen[CHUNK]) {
  for (int64_t d = 0; d < dv; d += 16) {
    __mmask16 mask = fc512_tail_mask(dv - d);
    __m512 acc[CHUNK];
    for (int s = 0; s < CHUNK; s++)
      acc[s] = _mm512_maskz_loadu_ps(mask, o + s * dv + d);
    for (int64_t j = 0; j < n; j++) {
      __m512 v = fc512_load(v_rows[j], dtype, d, mask);
      for (int s = 0; s < CHUNK; s++)
        if ((seen[s] >> j) & 1u)
          acc[s] = _mm512_fmadd_ps(
              _mm512_set1_ps(weights[s * KEY_BLOCK + j]), v, acc[s]);
    }
    for (int s = 0; s < CHUNK; s++)
      _mm512_mask_storeu_ps(o + s * dv + d, mask, acc[s]);
  }
}

static void accumulate_dispatch(const char *const *v_rows,
                                flashcpu_dtype dtype, int64_t dv, int64_t n,
                                float *o, const float *weights,
                                const __mmask16 seen[CHUNK]) {
#define VALUES_FOR(dt, dim)                                                    \
  accumulate_values(v_rows, dt, dim, n, o, weights, seen)
#define BY_DTYPE(dim_value)                                                    \
  switch (dtype) {                                                             \
  case FLASHCPU_DTYPE_F32: VALUES_FOR(FLASHCPU_DTYPE_F32, dim_value); return;  \
  case FLASHCPU_DTYPE_F16: VALUES_FOR(FLASHCPU_DTYPE_F16, dim_value); return;  \
  default: VALUES_FOR(FLASHCPU_DTYPE_BF16, dim_value); return;                 \
  }
  if (dv == 128) BY_DTYPE(128)
  if (dv == 64) BY_DTYPE(64)
  BY_DTYPE(dv)
#undef BY_DTYPE
#undef VALUES_FOR
}

static void prefetch_rows(const fc_view *view, int64_t b, int64_t kv_head,
                          int64_t j0, int64_t j1, int64_t dim) {
  const int64_t bytes = dim * view->element_size;
  for (int64_t j = j0; j < j1; j++) {
    const char *row = fc_view_row(view, b, j, kv_head);
    for (int64_t offset = 0; offset < bytes; offset += 64)
      _mm_prefetch(row + offset, _MM_HINT_T0);
  }
}

static float *record_of(const splitkv_args *a, int64_t bk, int64_t split,
                        int64_t slot) {
  return a->partials +
         ((bk * a->plan.splits + split) * a->plan.slots + slot) *
             fc_state_floats(a->p->v_head_dim);
}

static void init_chunks(const splitkv_args *a, const chunk_state *st,
                        int64_t b, int64_t kv_head, const fc_team_view *team) {
  const fc_problem *p = a->p;
  const int64_t D = p->head_dim, Dv = p->v_head_dim, PD = a->padded_dim;
  for (int64_t mine = 0; mine < st->count; mine++) {
    const int64_t chunk = team->rank + mine * team->size;
    for (int s = 0; s < CHUNK; s++) {
      const int64_t slot = chunk * CHUNK + s, i = mine * CHUNK + s;
      float *q = st->q + i * PD;
      memset(q, 0, (size_t)PD * sizeof(float));
      if (slot < a->plan.slots)
        a->table->row_to_f32[p->q.dtype](
            fc_view_row(&p->q, b, slot / p->group,
                        kv_head * p->group + slot % p->group),
            D, a->q_factor, q);
      memset(st->o + i * Dv, 0, (size_t)Dv * sizeof(float));
      memset(st->l + i * KEY_BLOCK, 0, KEY_BLOCK * sizeof(float));
      st->m[i] = -INFINITY;
    }
  }
}

static void splitkv_tile(void *opaque, int64_t tile,
                         const fc_team_view *team) {
  const splitkv_args *a = opaque;
  const fc_problem *p = a->p;
  const int64_t split = tile % a->plan.splits, bk = tile / a->plan.splits;
  const int64_t b = bk / p->kv_heads, kv_head = bk % p->kv_heads;
  const int64_t D = p->head_dim, Dv = p->v_head_dim;
  const chunk_state st = carve(a, team);
  const int64_t kv_length = fc_problem_kv_length(p, b);

  /* Keys of this split that some row of the tile sees. */
  const fc_key_range first = fc_row_key_range(p, kv_length, 0);
  const fc_key_range last = fc_row_key_range(p, kv_length, p->q_len - 1);
  int64_t begin = split * a->plan.split_keys;
  int64_t end = begin + a->plan.split_keys;
  if (end > kv_length) end = kv_length;
  if (begin < first.begin) begin = first.begin;
  if (end > last.end) end = last.end;

  if (begin < end) init_chunks(a, &st, b, kv_head, team);
  for (int64_t j0 = begin; j0 < end; j0 += KEY_BLOCK) {
    const int64_t n = end - j0 < KEY_BLOCK ? end - j0 : KEY_BLOCK;
    const char *k_rows[KEY_BLOCK], *v_rows[KEY_BLOCK];
    for (int64_t j = 0; j < KEY_BLOCK; j++) {
      const int64_t key = j0 + (j < n ? j : n - 1);
      k_rows[j] = fc_view_row(&p->k, b, key, kv_head);
      v_rows[j] = fc_view_row(&p->v, b, key, kv_head);
    }
    if (j0 + KEY_BLOCK < end) {
      const int64_t next_end =
          j0 + 2 * KEY_BLOCK < end ? j0 + 2 * KEY_BLOCK : end;
      prefetch_rows(&p->k, b, kv_head, j0 + KEY_BLOCK, next_end, D);
      prefetch_rows(&p->v, b, kv_head, j0 + KEY_BLOCK, next_end, Dv);
    }
    for (int64_t mine = 0; mine < st.count; mine++) {
      const int64_t chunk = team->rank + mine * team->size;
      const int64_t i0 = mine * CHUNK;
      __m512 scores[CHUNK];
      chunk_scores_dispatch(k_rows, p->k.dtype, st.q + i0 * a->padded_dim,
                            a->padded_dim, D, n, scores);
      if (a->needs_finish) {
        float s[CHUNK * KEY_BLOCK];
        for (int c = 0; c < CHUNK; c++) {
          _mm512_storeu_ps(s + c * KEY_BLOCK, scores[c]);
          finish_scores(a, s + c * KEY_BLOCK, b, kv_head, chunk * CHUNK + c,
                        j0, n, kv_length);
          scores[c] = _mm512_loadu_ps(s + c * KEY_BLOCK);
        }
      }
      __mmask16 seen[CHUNK];
      for (int c = 0; c < CHUNK; c++)
        seen[c] = softmax_block(scores[c], n, &st.m[i0 + c],
                                st.l + (i0 + c) * KEY_BLOCK,
                                st.o + (i0 + c) * Dv, Dv,
                                st.weights + c * KEY_BLOCK);
      if (seen[0] | seen[1] | seen[2] | seen[3])
        accumulate_dispatch(v_rows, p->v.dtype, Dv, n, st.o + i0 * Dv,
                            st.weights, seen);
    }
  }

  /* Partial states of this split; an empty one is m = -inf only. */
  for (int64_t mine = 0; mine < st.count; mine++) {
    const int64_t chunk = team->rank + mine * team->size;
    for (int c = 0; c < CHUNK; c++) {
      const int64_t slot = chunk * CHUNK + c, i = mine * CHUNK + c;
      if (slot >= a->plan.slots) break;
      float *record = record_of(a, bk, split, slot);
      if (begin >= end || st.m[i] == -INFINITY) {
        record[FC_STATE_M] = -INFINITY;
        continue;
      }
      record[FC_STATE_M] = st.m[i];
      record[FC_STATE_L] =
          _mm512_reduce_add_ps(_mm512_loadu_ps(st.l + i * KEY_BLOCK));
      memcpy(record + FC_STATE_O, st.o + i * Dv, (size_t)Dv * sizeof(float));
    }
  }
}

/* Tile = (batch, kv head, slot): one fixed tree over the splits. */
static void merge_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const splitkv_args *a = opaque;
  if (team->rank != 0) return;
  const fc_problem *p = a->p;
  const int64_t slot = tile % a->plan.slots, bk = tile / a->plan.slots;
  const int64_t b = bk / p->kv_heads, kv_head = bk % p->kv_heads;
  float *first = record_of(a, bk, 0, slot);
  fc_merge_state_tree(first,
                      a->plan.slots * fc_state_floats(p->v_head_dim),
                      a->plan.splits, p->v_head_dim);
  fc_write_output_row(p, b, slot / p->group,
                      kv_head * p->group + slot % p->group,
                      first[FC_STATE_M], first[FC_STATE_L],
                      first + FC_STATE_O);
}

flashcpu_status fc_attention_decode_splitkv__avx512(
    flashcpu_context *ctx, fc_runtime *runtime,
    const struct fc_kernel_table *table, const fc_problem *p) {
  splitkv_args a;
  memset(&a, 0, sizeof a);
  a.p = p;
  a.table = table;
  a.plan = fc_splitkv_make_plan(p);
  a.chunks = (a.plan.slots + CHUNK - 1) / CHUNK;
  a.padded_dim = (p->head_dim + 15) / 16 * 16;
  a.scores_final = p->softcap == 0.0f && !p->additive;
  a.q_factor = a.scores_final ? p->scale * LOG2E_F : p->scale;
  const bool rows_differ =
      p->q_len > 1 && (p->causal || p->window_left >= 0 ||
                       p->window_right >= 0);
  a.needs_finish = !a.scores_final || p->tree || rows_differ;

  const int64_t tiles = p->batch * p->kv_heads * a.plan.splits;
  const size_t workspace = (size_t)tiles * (size_t)a.plan.slots *
                           (size_t)fc_state_floats(p->v_head_dim) *
                           sizeof(float);
  if (fc_runtime_reserve_call_workspace(runtime, workspace) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "flashcpu_attention: out of memory allocating %zu bytes "
                   "for split-KV partial states",
                   workspace);
  a.partials = runtime->call_workspace;
  flashcpu_status status =
      fc_kernel_reserve_scratch(ctx, runtime, scratch_for_team, &a);
  if (status != FLASHCPU_OK) return status;

  fc_launch splits = {splitkv_tile, &a, tiles, false, NULL};
  fc_launch merge = {merge_tile, &a, p->batch * p->kv_heads * a.plan.slots,
                     false, NULL};
  if (fc_runtime_launch(runtime, &splits) != 0 ||
      fc_runtime_launch(runtime, &merge) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "flashcpu_attention: out of memory launching split-KV "
                   "decode");
  return FLASHCPU_OK;
}
