/* Portable tiled attention (FlashAttention-2 order of loops).
 *
 * A tile is (batch, kv head, block of query rows) and covers every query
 * head of the GQA group, so each K/V block is converted to f32 once and used
 * by all of them. Inside a tile the K/V range is walked in blocks of
 * REF_KV_BLOCK keys; each block is classified empty (skipped, never loaded),
 * full (no mask work) or partial (rows clamp to their key range, tree bits
 * per key). Scores live in the log2 domain: when there is no softcap or
 * additive mask, Q is pre-scaled by scale * log2(e) on load, so the inner
 * loop is a dot product and an exp2. Workspace is O(tile) per thread; there
 * is no L x S buffer. */
#include "ref/ref_attention.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "common/dtype_convert.h"
#include "common/mask.h"

enum {
  REF_KV_BLOCK = 64,
  REF_ROWS_TIMES_HEADS = 64, /* query rows x group heads held per tile */
  REF_DOT_LANES = 8          /* independent partial sums: lets -O2 vectorise */
};

#define LOG2E_F 1.44269504088896340736f
#define LN2_F 0.69314718055994530942f

typedef struct ref_plan {
  int64_t rows_per_tile;
  int64_t tiles_per_head;
  int64_t tile_count;
  size_t floats_per_thread;
  float q_factor;    /* applied to Q on load */
  bool scores_final; /* Q carries log2(e): scores need no more work */
} ref_plan;

typedef struct ref_workspace {
  float *q; /* [group][rows][D] */
  float *o; /* [group][rows][Dv] unnormalised output */
  float *m; /* [group][rows] running max, log2 domain */
  float *l; /* [group][rows] running sum */
  float *k; /* [REF_KV_BLOCK][D] */
  float *v; /* [REF_KV_BLOCK][Dv] */
  float *s; /* [REF_KV_BLOCK] scores of one row */
} ref_workspace;

static ref_plan make_plan(const fc_problem *p) {
  ref_plan plan;
  int64_t rows = REF_ROWS_TIMES_HEADS / p->group;
  if (rows < 1) rows = 1;
  if (rows > p->q_len) rows = p->q_len;
  plan.rows_per_tile = rows;
  plan.tiles_per_head = (p->q_len + rows - 1) / rows;
  plan.tile_count = p->batch * p->kv_heads * plan.tiles_per_head;
  int64_t heads_rows = p->group * rows;
  plan.floats_per_thread =
      (size_t)(heads_rows * (p->head_dim + p->v_head_dim + 2) +
               REF_KV_BLOCK * (p->head_dim + p->v_head_dim + 1));
  /* Keep each thread's slice on its own cache lines. */
  plan.floats_per_thread = (plan.floats_per_thread + 15) & ~(size_t)15;
  plan.scores_final = p->softcap == 0.0f && p->additive == NULL;
  plan.q_factor = plan.scores_final ? p->scale * LOG2E_F : p->scale;
  return plan;
}

static ref_workspace carve_workspace(const fc_problem *p, const ref_plan *plan,
                                     float *base) {
  int64_t heads_rows = p->group * plan->rows_per_tile;
  ref_workspace w;
  w.q = base;
  w.o = w.q + heads_rows * p->head_dim;
  w.m = w.o + heads_rows * p->v_head_dim;
  w.l = w.m + heads_rows;
  w.k = w.l + heads_rows;
  w.v = w.k + REF_KV_BLOCK * p->head_dim;
  w.s = w.v + REF_KV_BLOCK * p->v_head_dim;
  return w;
}

static float dot(const float *a, const float *b, int64_t n) {
  float partial[REF_DOT_LANES] = {0};
  int64_t d = 0;
  for (; d + REF_DOT_LANES <= n; d += REF_DOT_LANES)
    for (int lane = 0; lane < REF_DOT_LANES; lane++)
      partial[lane] += a[d + lane] * b[d + lane];
  float sum = 0.0f;
  for (; d < n; d++) sum += a[d] * b[d];
  for (int lane = 0; lane < REF_DOT_LANES; lane++) sum += partial[lane];
  return sum;
}

/* Softcap and additive mask on a scaled score, then into the log2 domain. */
static float finish_score(const fc_problem *p, float score,
                          const float *mask_row, int64_t key) {
  if (p->softcap > 0.0f) score = p->softcap * tanhf(score / p->softcap);
  if (mask_row) score += mask_row[key * p->additive->strides[3]];
  return score * LOG2E_F;
}

/* Folds scores s[0..count) of keys whose V rows start at v into one row's
 * running state. Keys with score -inf are hidden and never touch V. NaN
 * scores are kept as the max so that they poison the row, as they must. */
static void online_softmax_update(float *m, float *l, float *o,
                                  const float *s, const float *v,
                                  int64_t count, int64_t v_dim) {
  float block_max = -INFINITY;
  for (int64_t c = 0; c < count; c++)
    if (s[c] > block_max || isnan(s[c])) block_max = s[c];
  float m_new = (block_max > *m || isnan(block_max)) ? block_max : *m;
  if (m_new == -INFINITY) return; /* nothing visible yet */
  float alpha = exp2f(*m - m_new);
  for (int64_t d = 0; d < v_dim; d++) o[d] *= alpha;
  float sum = 0.0f;
  for (int64_t c = 0; c < count; c++) {
    if (s[c] == -INFINITY) continue;
    float weight = exp2f(s[c] - m_new);
    sum += weight;
    const float *v_row = v + c * v_dim;
    for (int64_t d = 0; d < v_dim; d++) o[d] += weight * v_row[d];
  }
  *l = *l * alpha + sum;
  *m = m_new;
}

static void load_block(const fc_view *view, int64_t b, int64_t kv_head,
                       int64_t key_begin, int64_t key_end, int64_t dim,
                       float *destination) {
  for (int64_t j = key_begin; j < key_end; j++)
    fc_load_row_f32(fc_view_row(view, b, j, kv_head), view->dtype, dim, 1.0f,
                    destination + (j - key_begin) * dim);
}

static void write_row(const fc_problem *p, int64_t b, int64_t row,
                      int64_t head, float m, float l, const float *o) {
  char *out = (char *)fc_view_row(&p->out, b, row, head);
  float lse;
  if (m == -INFINITY) { /* saw no key: 0 and -inf, never 0/0 */
    memset(out, 0, (size_t)(p->v_head_dim * p->out.element_size));
    lse = -INFINITY;
  } else {
    fc_store_row(o, 1.0f / l, p->v_head_dim, p->out.dtype, out);
    lse = (m + log2f(l)) * LN2_F;
  }
  if (p->lse) p->lse[(b * p->q_heads + head) * p->q_len + row] = lse;
}

static void run_tile(const fc_problem *p, const ref_plan *plan, int64_t tile,
                     const ref_workspace *w) {
  const int64_t rows = plan->rows_per_tile;
  const int64_t per_batch = p->kv_heads * plan->tiles_per_head;
  const int64_t b = tile / per_batch;
  const int64_t kv_head = (tile % per_batch) / plan->tiles_per_head;
  const int64_t row_begin = (tile % plan->tiles_per_head) * rows;
  const int64_t row_end =
      row_begin + rows < p->q_len ? row_begin + rows : p->q_len;
  const int64_t row_count = row_end - row_begin;
  const int64_t kv_length = fc_problem_kv_length(p, b);
  const int64_t tree_begin = fc_tree_begin(p, kv_length);
  const int64_t D = p->head_dim, Dv = p->v_head_dim;

  for (int64_t g = 0; g < p->group; g++)
    for (int64_t r = 0; r < row_count; r++) {
      int64_t slot = g * rows + r;
      fc_load_row_f32(fc_view_row(&p->q, b, row_begin + r,
                                  kv_head * p->group + g),
                      p->q.dtype, D, plan->q_factor, w->q + slot * D);
      w->m[slot] = -INFINITY;
      w->l[slot] = 0.0f;
      memset(w->o + slot * Dv, 0, (size_t)Dv * sizeof(float));
    }

  fc_key_range first = fc_row_key_range(p, kv_length, row_begin);
  fc_key_range last = fc_row_key_range(p, kv_length, row_end - 1);
  int64_t key_begin = first.begin - first.begin % REF_KV_BLOCK;
  for (int64_t j0 = key_begin; j0 < last.end; j0 += REF_KV_BLOCK) {
    int64_t j1 = j0 + REF_KV_BLOCK < kv_length ? j0 + REF_KV_BLOCK : kv_length;
    fc_tile_kind kind =
        fc_classify_tile(p, kv_length, row_begin, row_end, j0, j1);
    if (kind == FC_TILE_EMPTY) continue;
    load_block(&p->k, b, kv_head, j0, j1, D, w->k);
    load_block(&p->v, b, kv_head, j0, j1, Dv, w->v);

    for (int64_t g = 0; g < p->group; g++) {
      int64_t head = kv_head * p->group + g;
      for (int64_t r = 0; r < row_count; r++) {
        int64_t row = row_begin + r, slot = g * rows + r;
        int64_t a = j0, e = j1;
        if (kind == FC_TILE_PARTIAL) {
          fc_key_range range = fc_row_key_range(p, kv_length, row);
          if (range.begin > a) a = range.begin;
          if (range.end < e) e = range.end;
          if (a >= e) continue;
        }
        const float *q_row = w->q + slot * D;
        const float *mask_row =
            p->additive ? p->additive->data + b * p->additive->strides[0] +
                              head * p->additive->strides[1] +
                              row * p->additive->strides[2]
                        : NULL;
        for (int64_t j = a; j < e; j++) {
          float score = dot(q_row, w->k + (j - j0) * D, D);
          if (!plan->scores_final) score = finish_score(p, score, mask_row, j);
          if (kind == FC_TILE_PARTIAL && j >= tree_begin &&
              !fc_tree_allows(p, b, row, j, tree_begin))
            score = -INFINITY;
          w->s[j - a] = score;
        }
        online_softmax_update(&w->m[slot], &w->l[slot], w->o + slot * Dv,
                              w->s, w->v + (a - j0) * Dv, e - a, Dv);
      }
    }
  }

  for (int64_t g = 0; g < p->group; g++)
    for (int64_t r = 0; r < row_count; r++) {
      int64_t slot = g * rows + r;
      write_row(p, b, row_begin + r, kv_head * p->group + g, w->m[slot],
                w->l[slot], w->o + slot * Dv);
    }
}

flashcpu_status fc_ref_attention(flashcpu_context *ctx, const fc_problem *p,
                                 int num_threads) {
  ref_plan plan = make_plan(p);
  if (num_threads > plan.tile_count) num_threads = (int)plan.tile_count;
  if (num_threads < 1) num_threads = 1;
  size_t bytes = plan.floats_per_thread * sizeof(float) * (size_t)num_threads;
  float *workspace = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!workspace)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "flashcpu_attention: out of memory allocating %zu bytes of "
                   "workspace",
                   bytes);
#pragma omp parallel num_threads(num_threads)
  {
    ref_workspace w = carve_workspace(
        p, &plan,
        workspace + plan.floats_per_thread * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < plan.tile_count; tile++)
      run_tile(p, &plan, tile, &w);
  }
  free(workspace);
  return FLASHCPU_OK;
}
