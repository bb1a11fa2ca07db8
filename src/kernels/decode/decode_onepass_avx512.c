/* f32/f16/bf16 one-pass decode for AVX-512 (q_len == 1).
 *
 * Tile = (batch, kv head). Keys go in blocks of 16: for each key the K row
 * is widened to f32 16 lanes at a time and dotted with the group's query
 * heads (8 heads' accumulators in registers at once); the 16 scores of a
 * head then form one vector for the online softmax (vector exp2 in the log2
 * domain), and each V row, widened once, is added into every head's output
 * accumulator (kept in L1). Masks: the row's key range bounds the loop;
 * tree bits, softcap and the additive mask are applied per score. Hidden
 * keys (score -inf) never touch V. */
#include <math.h>
#include <string.h>

#include "api/errors.h"
#include "common/mask.h"
#include "common/score.h"
#include "dispatch/kernel_table.h"
#include "kernels/kernel_support.h"
#include "kernels/decode/decode_onepass.h"
#include "simd/simd_avx512.h"

enum { KEY_BLOCK = 16, HEADS_IN_REGISTERS = 8 };


typedef struct decode_args {
  const fc_problem *p;
  const fc_kernel_table *table;
  float q_factor;
  int scores_final; /* no softcap or additive mask: Q carries log2(e) */
} decode_args;

/* Per thread: its heads' q, o, scores and weights of a block, m and l. */
typedef struct head_state {
  float *q, *o, *s, *m, *l;
} head_state;

static size_t floats_per_head(const fc_problem *p) {
  return (size_t)(p->head_dim + p->v_head_dim + KEY_BLOCK + 2);
}

static int64_t heads_of_rank(const fc_problem *p, int team_size) {
  return (p->group + team_size - 1) / team_size;
}

static size_t scratch_for_team(const void *problem, int team_size) {
  const fc_problem *p = problem;
  return (size_t)team_size * (size_t)heads_of_rank(p, team_size) *
         floats_per_head(p) * sizeof(float);
}

static head_state carve(const fc_problem *p, const fc_team_view *team) {
  int64_t heads = heads_of_rank(p, team->size);
  float *base = (float *)team->scratch +
                (size_t)team->rank * (size_t)heads * floats_per_head(p);
  head_state st;
  st.q = base;
  st.o = st.q + heads * p->head_dim;
  st.s = st.o + heads * p->v_head_dim;
  st.m = st.s + heads * KEY_BLOCK;
  st.l = st.m + heads;
  return st;
}

/* Scores of keys [j0, j0 + n) for heads [h0, h0 + count) of this thread. */
static void block_scores(const decode_args *a, const head_state *st,
                         int64_t b, int64_t kv_head, int64_t j0, int64_t n,
                         int64_t h0, int64_t count) {
  const fc_problem *p = a->p;
  const int64_t D = p->head_dim;
  for (int64_t j = 0; j < n; j++) {
    const char *k_row = fc_view_row(&p->k, b, j0 + j, kv_head);
    __m512 acc[HEADS_IN_REGISTERS];
    for (int64_t h = 0; h < count; h++) acc[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      __mmask16 mask = fc512_tail_mask(D - d);
      __m512 k = fc512_load(k_row, p->k.dtype, d, mask);
      for (int64_t h = 0; h < count; h++)
        acc[h] = _mm512_fmadd_ps(
            _mm512_maskz_loadu_ps(mask, st->q + (h0 + h) * D + d), k, acc[h]);
    }
    for (int64_t h = 0; h < count; h++)
      st->s[(h0 + h) * KEY_BLOCK + j] = _mm512_reduce_add_ps(acc[h]);
  }
}

/* Softcap, additive mask, tree bits: what the range alone does not say. */
static void finish_scores(const decode_args *a, float *s, int64_t b,
                          int64_t head, int64_t j0, int64_t n,
                          int64_t kv_length) {
  const fc_problem *p = a->p;
  const int64_t row = 0, tree_begin = fc_tree_begin(p, kv_length);
  const float *mask_row =
      p->additive ? p->additive->data + b * p->additive->strides[0] +
                        head * p->additive->strides[1]
                  : NULL;
  for (int64_t j = 0; j < n; j++) {
    int64_t key = j0 + j;
    if (!a->scores_final) {
      s[j] = fc_finish_score(p, s[j], mask_row, key);
    }
    if (key >= tree_begin && !fc_tree_allows(p, b, row, key, tree_begin))
      s[j] = -INFINITY;
  }
}

/* Online softmax for one head: s[0..n) becomes the weights p; returns the
 * factor the accumulated output must be scaled by, or -1 when the head has
 * seen nothing yet (then nothing is accumulated). */
static float softmax_block(float *s, int64_t n, float *m, float *l) {
  __mmask16 lanes = fc512_tail_mask(n);
  __m512 scores =
      _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes, s);
  float block_max = _mm512_reduce_max_ps(scores);
  if (_mm512_cmp_ps_mask(scores, scores, _CMP_UNORD_Q)) block_max = NAN;
  float m_new = (block_max > *m || isnan(block_max)) ? block_max : *m;
  if (m_new == -INFINITY) return -1.0f;
  float alpha = exp2f(*m - m_new);
  __m512 weights = fc512_exp2(_mm512_sub_ps(scores, _mm512_set1_ps(m_new)));
  weights = _mm512_maskz_mov_ps(lanes, weights);
  *l = *l * alpha + _mm512_reduce_add_ps(weights);
  *m = m_new;
  _mm512_storeu_ps(s, weights);
  return alpha;
}

static void scale_output(float *o, int64_t dv, float alpha) {
  __m512 factor = _mm512_set1_ps(alpha);
  for (int64_t d = 0; d < dv; d += 16) {
    __mmask16 mask = fc512_tail_mask(dv - d);
    _mm512_mask_storeu_ps(o + d, mask,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, o + d),
                                        factor));
  }
}

/* o[h] += p[h][j] * v_j for every key of the block and every active head;
 * a key hidden from a head (hidden_scores -inf; NULL when no mask can hide
 * keys inside the range) is skipped for it. Each 16-lane slice of up to 8
 * heads' outputs stays in registers across the block's keys. */
static void accumulate_values(const decode_args *a, const head_state *st,
                              const float *hidden_scores, int64_t b,
                              int64_t kv_head, int64_t j0, int64_t n,
                              const unsigned char *active, int64_t heads) {
  const fc_problem *p = a->p;
  const int64_t Dv = p->v_head_dim;
  const char *v_rows[KEY_BLOCK];
  for (int64_t j = 0; j < n; j++)
    v_rows[j] = fc_view_row(&p->v, b, j0 + j, kv_head);
  for (int64_t h0 = 0; h0 < heads; h0 += HEADS_IN_REGISTERS) {
    int64_t count =
        heads - h0 < HEADS_IN_REGISTERS ? heads - h0 : HEADS_IN_REGISTERS;
    for (int64_t d = 0; d < Dv; d += 16) {
      __mmask16 mask = fc512_tail_mask(Dv - d);
      __m512 acc[HEADS_IN_REGISTERS];
      for (int64_t h = 0; h < count; h++)
        acc[h] = _mm512_maskz_loadu_ps(mask, st->o + (h0 + h) * Dv + d);
      for (int64_t j = 0; j < n; j++) {
        __m512 v = fc512_load(v_rows[j], p->v.dtype, d, mask);
        for (int64_t h = 0; h < count; h++) {
          int64_t head = h0 + h;
          if (!active[head] || (hidden_scores &&
                                hidden_scores[head * KEY_BLOCK + j] == -INFINITY))
            continue;
          acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(st->s[head * KEY_BLOCK + j]),
                                   v, acc[h]);
        }
      }
      for (int64_t h = 0; h < count; h++)
        _mm512_mask_storeu_ps(st->o + (h0 + h) * Dv + d, mask, acc[h]);
    }
  }
}

static void decode_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const decode_args *a = opaque;
  const fc_problem *p = a->p;
  const int64_t b = tile / p->kv_heads, kv_head = tile % p->kv_heads;
  const int64_t D = p->head_dim, Dv = p->v_head_dim;
  const head_state st = carve(p, team);
  /* This thread's heads of the group: rank, rank + size, ... */
  int64_t heads = 0, head_of[FC_DECODE_MAX_HEADS_PER_THREAD];
  for (int64_t g = team->rank; g < p->group; g += team->size)
    head_of[heads++] = kv_head * p->group + g;

  for (int64_t h = 0; h < heads; h++) {
    a->table->row_to_f32[p->q.dtype](fc_view_row(&p->q, b, 0, head_of[h]), D,
                                     a->q_factor, st.q + h * D);
    memset(st.o + h * Dv, 0, (size_t)Dv * sizeof(float));
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
  }

  const int64_t kv_length = fc_problem_kv_length(p, b);
  const fc_key_range range = fc_row_key_range(p, kv_length, 0);
  const int hides_keys = p->tree || p->additive;
  float hidden[FC_DECODE_MAX_HEADS_PER_THREAD * KEY_BLOCK];
  unsigned char active[FC_DECODE_MAX_HEADS_PER_THREAD];
  for (int64_t j0 = range.begin; j0 < range.end; j0 += KEY_BLOCK) {
    int64_t n = range.end - j0 < KEY_BLOCK ? range.end - j0 : KEY_BLOCK;
    for (int64_t h0 = 0; h0 < heads; h0 += HEADS_IN_REGISTERS) {
      int64_t count = heads - h0 < HEADS_IN_REGISTERS ? heads - h0
                                                      : HEADS_IN_REGISTERS;
      block_scores(a, &st, b, kv_head, j0, n, h0, count);
    }
    for (int64_t h = 0; h < heads; h++) {
      float *s = st.s + h * KEY_BLOCK;
      finish_scores(a, s, b, head_of[h], j0, n, kv_length);
      if (hides_keys) memcpy(hidden + h * KEY_BLOCK, s, sizeof(float) * KEY_BLOCK);
      float alpha = softmax_block(s, n, &st.m[h], &st.l[h]);
      active[h] = alpha >= 0.0f || isnan(alpha);
      if (active[h] && alpha != 1.0f) scale_output(st.o + h * Dv, Dv, alpha);
    }
    accumulate_values(a, &st, hides_keys ? hidden : NULL, b, kv_head, j0, n,
                      active, heads);
  }

  for (int64_t h = 0; h < heads; h++)
    fc_write_output_row(p, b, 0, head_of[h], st.m[h], st.l[h], st.o + h * Dv);
}

flashcpu_status fc_attention_decode_onepass__avx512(
    flashcpu_context *ctx, fc_runtime *runtime,
    const struct fc_kernel_table *table, const fc_problem *p) {
  decode_args a = {p, table, 0.0f, p->softcap == 0.0f && !p->additive};
  a.q_factor = a.scores_final ? p->scale * FC_LOG2E_F : p->scale;
  flashcpu_status status =
      fc_kernel_reserve_scratch(ctx, runtime, scratch_for_team, p);
  if (status != FLASHCPU_OK) return status;
  fc_launch launch = {decode_tile, &a, p->batch * p->kv_heads, false, NULL};
  if (fc_runtime_launch(runtime, &launch) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "flashcpu_attention: out of memory launching decode");
  return FLASHCPU_OK;
}
