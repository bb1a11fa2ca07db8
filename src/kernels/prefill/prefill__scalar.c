/* Portable tiled attention (FlashAttention-2 order of loops).
 *
 * A tile is (batch, kv head, block of query rows) and covers every query
 * head of the GQA group, so each K/V block is converted to f32 once and used
 * by all of them. Inside a tile the K/V range is walked in blocks of
 * REF_KV_BLOCK keys; each block is classified empty (skipped, never loaded),
 * full (no mask work) or partial (rows clamp to their key range, tree bits
 * per key). Scores live in the log2 domain: when there is no softcap or
 * additive mask, Q is pre-scaled by scale * log2(e) on load, so the inner
 * loop is a dot product and an exp2.
 *
 * It runs on the runtime's launch API like a GPU kernel: the threads of a
 * team convert each K/V block together into the team's scratch (the
 * threadgroup memory), wait at the team barrier, then each thread works on
 * its share of the tile's (head, row) slots. A slot is computed by one thread
 * in a fixed order, so the output does not depend on the team size or the
 * thread count. Workspace is O(tile) per team; there is no L x S buffer. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/mask.h"
#include "common/score.h"
#include "kernels/kernel_support.h"
#include "kernels/prefill/prefill_driver.h"
#include "kernels/registry.h"

enum {
  REF_KV_BLOCK = 64,
  REF_ROWS_TIMES_HEADS = 64, /* query rows x group heads held per tile */
  REF_DOT_LANES = 8          /* independent partial sums: lets -O2 vectorise */
};

/* The portable kernel reads the first fields of the drivers' arguments. */
typedef fc_prefill_args ref_args;

/* One team's scratch: shared K/V block, then each thread's slots. */
typedef struct ref_workspace {
  float *k; /* [REF_KV_BLOCK][D], shared by the team */
  float *v; /* [REF_KV_BLOCK][Dv], shared by the team */
  float *q; /* [my slots][D] */
  float *o; /* [my slots][Dv] unnormalised output */
  float *m; /* [my slots] running max, log2 domain */
  float *l; /* [my slots] running sum */
  float *s; /* [REF_KV_BLOCK] scores of one row */
} ref_workspace;

static size_t round_floats(size_t floats) {
  return (floats + 15) & ~(size_t)15;
}

static size_t slots_of_rank(const fc_prefill_plan *plan, int team_size) {
  return (size_t)((plan->slots_per_tile + team_size - 1) / team_size);
}

static size_t shared_floats(const fc_problem *p) {
  return round_floats((size_t)(REF_KV_BLOCK * (p->head_dim + p->v_head_dim)));
}

static size_t rank_floats(const fc_problem *p, const fc_prefill_plan *plan,
                          int team_size) {
  size_t slots = slots_of_rank(plan, team_size);
  return round_floats(slots * (size_t)(p->head_dim + p->v_head_dim + 2) +
                      REF_KV_BLOCK);
}

static size_t team_scratch_bytes(const fc_problem *p,
                                 const fc_prefill_plan *plan, int team_size) {
  return (shared_floats(p) +
          (size_t)team_size * rank_floats(p, plan, team_size)) *
         sizeof(float);
}

static size_t scratch_for_team(const void *opaque, int team_size) {
  const ref_args *args = opaque;
  return team_scratch_bytes(args->p, &args->plan, team_size);
}

static ref_workspace carve_workspace(const fc_problem *p,
                                     const fc_prefill_plan *plan,
                                     const fc_team_view *team) {
  float *base = team->scratch;
  size_t slots = slots_of_rank(plan, team->size);
  ref_workspace w;
  w.k = base;
  w.v = w.k + REF_KV_BLOCK * p->head_dim;
  w.q = base + shared_floats(p) +
        (size_t)team->rank * rank_floats(p, plan, team->size);
  w.o = w.q + slots * (size_t)p->head_dim;
  w.m = w.o + slots * (size_t)p->v_head_dim;
  w.l = w.m + slots;
  w.s = w.l + slots;
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

/* Folds scores s[0..count) of keys whose V rows start at v into one row's
 * running state. Keys with score -inf are hidden and never touch V. NaN
 * scores are kept as the max so that they poison the row, as they must. */
static void online_softmax_update(float *m, float *l, float *o, const float *s,
                                  const float *v, int64_t count,
                                  int64_t v_dim) {
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

/* The team converts keys [key_begin, key_end) together: thread r takes
 * every size-th row starting at r. */
static void load_block_shared(const ref_args *args, const fc_view *view,
                              int64_t b, int64_t kv_head, int64_t key_begin,
                              int64_t key_end, int64_t dim,
                              const fc_team_view *team, float *destination) {
  for (int64_t j = key_begin + team->rank; j < key_end; j += team->size)
    fc_kv_row_to_f32(args->row_to_f32, args->dequant_row, view,
                     fc_view_row(view, b, j, kv_head), b, j, kv_head, dim,
                     destination + (j - key_begin) * dim);
}

/* Slot `slot` of a tile is (group head slot / rows, row slot % rows); this
 * thread owns slots rank, rank + size, ... */
static void run_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const ref_args *args = opaque;
  const fc_problem *p = args->p;
  const fc_prefill_plan *plan = &args->plan;
  const ref_workspace w = carve_workspace(p, plan, team);
  const int64_t rows = plan->rows_per_tile;
  const fc_prefill_tile at = fc_prefill_locate(p, plan, tile);
  const int64_t b = at.b, kv_head = at.kv_head;
  const int64_t row_begin = at.row_begin, row_end = at.row_end;
  const int64_t row_count = row_end - row_begin;
  const int64_t kv_length = fc_problem_kv_length(p, b);
  const int64_t tree_begin = fc_tree_begin(p, b, kv_length);
  const int64_t D = p->head_dim, Dv = p->v_head_dim;
  const int64_t slot_count = p->group * rows;
  fc_row_to_f32_fn convert_q = args->row_to_f32[p->q.dtype];

  for (int64_t slot = team->rank, mine = 0; slot < slot_count;
       slot += team->size, mine++) {
    int64_t g = slot / rows, r = slot % rows;
    if (r >= row_count) continue;
    convert_q(fc_view_row(&p->q, b, row_begin + r, kv_head * p->group + g), D,
              plan->q_factor, w.q + mine * D);
    w.m[mine] = -INFINITY;
    w.l[mine] = 0.0f;
    memset(w.o + mine * Dv, 0, (size_t)Dv * sizeof(float));
  }

  fc_key_range first = fc_row_key_range(p, b, kv_length, row_begin);
  fc_key_range last = fc_row_key_range(p, b, kv_length, row_end - 1);
  int64_t key_begin = first.begin - first.begin % REF_KV_BLOCK;
  for (int64_t j0 = key_begin; j0 < last.end; j0 += REF_KV_BLOCK) {
    int64_t j1 = j0 + REF_KV_BLOCK < kv_length ? j0 + REF_KV_BLOCK : kv_length;
    fc_tile_kind kind =
        fc_classify_tile(p, b, kv_length, row_begin, row_end, j0, j1);
    if (kind == FC_TILE_EMPTY) continue;
    fc_barrier_wait(team->barrier); /* everyone is done with the last block */
    load_block_shared(args, &p->k, b, kv_head, j0, j1, D, team, w.k);
    load_block_shared(args, &p->v, b, kv_head, j0, j1, Dv, team, w.v);
    fc_barrier_wait(team->barrier); /* the block is complete */

    for (int64_t slot = team->rank, mine = 0; slot < slot_count;
         slot += team->size, mine++) {
      int64_t g = slot / rows, r = slot % rows;
      if (r >= row_count) continue;
      int64_t head = kv_head * p->group + g, row = row_begin + r;
      int64_t a = j0, e = j1;
      if (kind == FC_TILE_PARTIAL) {
        fc_key_range range = fc_row_key_range(p, b, kv_length, row);
        if (range.begin > a) a = range.begin;
        if (range.end < e) e = range.end;
        if (a >= e) continue;
      }
      const float *q_row = w.q + mine * D;
      const fc_row_finish finish =
          fc_row_finish_for(p, b, head, row, kv_length);
      for (int64_t j = a; j < e; j++) {
        float score = fc_saturate(dot(q_row, w.k + (j - j0) * D, D));
        if (!plan->scores_final) score = fc_finish_score(p, score, &finish, j);
        if (kind == FC_TILE_PARTIAL && j >= tree_begin &&
            !fc_tree_allows(p, b, row, j, tree_begin))
          score = -INFINITY;
        w.s[j - a] = score;
      }
      online_softmax_update(&w.m[mine], &w.l[mine], w.o + mine * Dv, w.s,
                            w.v + (a - j0) * Dv, e - a, Dv);
    }
  }

  for (int64_t slot = team->rank, mine = 0; slot < slot_count;
       slot += team->size, mine++) {
    int64_t g = slot / rows, r = slot % rows;
    if (r >= row_count) continue;
    fc_write_output_row(p, b, row_begin + r, kv_head * p->group + g, w.m[mine],
                        w.l[mine], w.o + mine * Dv);
  }
}

flashcpu_status fc_prefill__scalar(const fc_kernel_env *env,
                                   const fc_problem *p, fc_kernel_plan *plan) {
  ref_args args;
  memset(&args, 0, sizeof args);
  args.p = p;
  args.row_to_f32 = env->row_to_f32;
  args.dequant_row = env->dequant_row;
  args.plan = fc_prefill_plan_for(
      p, env->tile_slots > 0 ? env->tile_slots : REF_ROWS_TIMES_HEADS);
  args.tile = run_tile;
  return fc_prefill_plan_args(env, plan, &args, sizeof args, scratch_for_team);
}
