#include "kernels/prefill/prefill_driver.h"

#include <stddef.h>
#include <string.h>

#include "common/mask.h"
#include "common/math_constants.h"
#include "common/score.h"
#include "kernels/kernel_support.h"

fc_prefill_plan fc_prefill_plan_for(const fc_problem *p, int64_t target_slots) {
  fc_prefill_plan plan;
  int64_t rows = target_slots / p->group;
  if (rows < 1) rows = 1;
  if (rows > p->q_len) rows = p->q_len;
  if (rows < 1) rows = 1; /* a ragged batch whose requests have no rows */
  plan.rows_per_tile = rows;
  plan.tiles_per_head = (p->q_len + rows - 1) / rows;
  plan.tile_count = p->batch * p->kv_heads * plan.tiles_per_head;
  plan.tile_starts = NULL;
  plan.slots_per_tile = rows * p->group;
  plan.scores_final = fc_problem_scores_final(p);
  plan.q_factor = plan.scores_final ? p->scale * FC_LOG2E_F : p->scale;
  return plan;
}

/* Tiles of ragged batch b, per kv head. */
static int64_t tiles_per_head_of(const fc_problem *p,
                                 const fc_prefill_plan *plan, int64_t b) {
  return (fc_problem_q_len(p, b) + plan->rows_per_tile - 1) /
         plan->rows_per_tile;
}

fc_prefill_tile fc_prefill_locate(const fc_problem *p,
                                  const fc_prefill_plan *plan, int64_t tile) {
  fc_prefill_tile at;
  int64_t per_head = plan->tiles_per_head, local = tile;
  if (plan->tile_starts) { /* ragged: the last batch starting at or before */
    int64_t low = 0, high = p->batch - 1;
    while (low < high) {
      const int64_t middle = (low + high + 1) / 2;
      if (plan->tile_starts[middle] <= tile)
        low = middle;
      else
        high = middle - 1;
    }
    at.b = low;
    local = tile - plan->tile_starts[low];
    per_head = tiles_per_head_of(p, plan, low);
  } else {
    at.b = tile / (p->kv_heads * per_head);
    local = tile % (p->kv_heads * per_head);
  }
  const int64_t q_len = fc_problem_q_len(p, at.b);
  at.kv_head = local / per_head;
  at.row_begin = (local % per_head) * plan->rows_per_tile;
  at.row_end = at.row_begin + plan->rows_per_tile < q_len
                   ? at.row_begin + plan->rows_per_tile
                   : q_len;
  return at;
}

/* Keys a tile's rows see: what the heaviest-first order sorts by. */
static int64_t tile_weight(const void *opaque, int64_t tile) {
  const fc_prefill_args *a = opaque;
  const fc_problem *p = a->p;
  const fc_prefill_tile at = fc_prefill_locate(p, &a->plan, tile);
  int64_t kv_length = fc_problem_kv_length(p, at.b);
  fc_key_range first = fc_row_key_range(p, at.b, kv_length, at.row_begin);
  fc_key_range last = fc_row_key_range(p, at.b, kv_length, at.row_end - 1);
  return (last.end - first.begin) * (at.row_end - at.row_begin);
}

/* The call's problem and options, and the launch of its tiles. */
static void bind(fc_kernel_plan *plan, const fc_problem *p, void *workspace) {
  (void)workspace; /* prefill keeps everything in team scratch */
  fc_prefill_args *a = (fc_prefill_args *)(void *)plan->state;
  a->p = p;
  a->plan.scores_final = fc_problem_scores_final(p);
  a->plan.q_factor = a->plan.scores_final ? p->scale * FC_LOG2E_F : p->scale;
  /* Masks that limit rows unevenly make tiles uneven: heaviest first. */
  const bool uneven = p->causal || p->window_left >= 0 ||
                      p->window_right >= 0 || p->kv_lengths || p->q_lens;
  plan->main = (fc_launch){a->tile, plan->state, a->plan.tile_count, false,
                           uneven ? tile_weight : NULL};
  plan->after = (fc_launch){NULL, NULL, 0, false, NULL};
}

flashcpu_status fc_prefill_plan_args(const fc_kernel_env *env,
                                     fc_kernel_plan *plan, const void *args,
                                     size_t size, fc_scratch_bytes_fn scratch) {
  const flashcpu_status status = fc_kernel_plan_start(env, plan, args, size);
  if (status != FLASHCPU_OK) return status;
  fc_prefill_args *a = (fc_prefill_args *)(void *)plan->state;
  const fc_problem *p = a->p;
  if (p->q_lens) { /* ragged: each batch's first tile, in the caller's room */
    int64_t *starts = p->tile_starts;
    if (!starts)
      return fc_kernel_fail(env, FLASHCPU_ERROR_INTERNAL,
                            "a ragged batch without room for its tile starts");
    starts[0] = 0;
    for (int64_t b = 0; b < p->batch; b++)
      starts[b + 1] =
          starts[b] + p->kv_heads * tiles_per_head_of(p, &a->plan, b);
    a->plan.tile_starts = starts;
    a->plan.tile_count = starts[p->batch];
  }
  plan->scratch_bytes =
      fc_kernel_scratch_bytes(env->runtime, scratch, plan->state);
  plan->tile_count = a->plan.tile_count;
  plan->bind = bind;
  return FLASHCPU_OK;
}

/* ---- register-blocked kernels: team scratch ----------------------------- */

/* Scratch regions start on 64-byte lines. */
static size_t round_floats(size_t floats) {
  return (floats + 15) & ~(size_t)15;
}

static int64_t blocks_of_rank(const fc_prefill_args *a, int team_size) {
  return (a->blocks_per_tile + team_size - 1) / team_size;
}

/* head_dim and v_head_dim as the kernel stores them. */
static size_t dim_of(const fc_prefill_args *a) {
  return (size_t)fc_prefill_padded(a->p->head_dim, a->shape.dim_align);
}
static size_t dv_of(const fc_prefill_args *a) {
  return (size_t)fc_prefill_padded(a->p->v_head_dim, a->shape.dim_align);
}

/* The team's KV block, then one flag per rank. */
static size_t shared_floats(const fc_prefill_args *a, int team_size) {
  return round_floats((size_t)a->shape.kv_block * (dim_of(a) + dv_of(a))) +
         (size_t)team_size * FC_PREFILL_FLAG_STRIDE;
}

static size_t rank_floats(const fc_prefill_args *a, int team_size) {
  const size_t slots = (size_t)a->shape.slots;
  const size_t kv_block = (size_t)a->shape.kv_block;
  size_t blocks = (size_t)blocks_of_rank(a, team_size);
  size_t per_block = (dim_of(a) + dv_of(a) + 2) * slots;
  size_t row = dim_of(a) > dv_of(a) ? dim_of(a) : dv_of(a);
  /* st, hidden and the bf16 pairs (half a float each); q_largest */
  return round_floats(blocks * per_block + 2 * kv_block * slots +
                      round_floats(kv_block * slots / 2) + 4 * slots + row +
                      blocks);
}

static size_t scratch_for_team(const void *opaque, int team_size) {
  const fc_prefill_args *a = opaque;
  return (shared_floats(a, team_size) +
          (size_t)team_size * rank_floats(a, team_size)) *
             sizeof(float) +
         64; /* room to align the base */
}

fc_prefill_scratch fc_prefill_carve(const fc_prefill_args *a,
                                    const fc_team_view *team) {
  const size_t slots = (size_t)a->shape.slots;
  const size_t kv_block = (size_t)a->shape.kv_block;
  const size_t blocks = (size_t)blocks_of_rank(a, team->size);
  const size_t D = dim_of(a), Dv = dv_of(a);
  float *shared = (float *)(((uintptr_t)team->scratch + 63) & ~(uintptr_t)63);
  fc_prefill_scratch s;
  s.k_stage = shared;
  s.v_stage = shared + kv_block * D;
  s.flags = (int *)(shared + round_floats(kv_block * (D + Dv)));
  s.qt = shared + shared_floats(a, team->size) +
         (size_t)team->rank * rank_floats(a, team->size);
  s.ot = s.qt + blocks * D * slots;
  s.m = s.ot + blocks * Dv * slots;
  s.l = s.m + blocks * slots;
  s.st = s.l + blocks * slots;
  s.hidden = s.st + kv_block * slots;
  s.pairs = (uint16_t *)(s.hidden + kv_block * slots);
  s.alpha = s.hidden + kv_block * slots + round_floats(kv_block * slots / 2);
  s.begin = s.alpha + slots;
  s.end = s.begin + slots;
  s.mask_offsets = (int32_t *)(s.end + slots);
  s.row = s.end + 2 * slots;
  s.q_largest = s.row + (D > Dv ? D : Dv);
  return s;
}

flashcpu_status fc_prefill_plan_kernel(const fc_kernel_env *env,
                                       const fc_problem *p,
                                       const fc_prefill_shape *shape,
                                       fc_tile_kernel tile,
                                       fc_kernel_plan *plan) {
  fc_prefill_args a;
  memset(&a, 0, sizeof a);
  a.p = p;
  a.row_to_f32 = env->row_to_f32;
  a.dequant_row = env->dequant_row;
  a.plan = fc_prefill_plan_tiles(p, shape, env->runtime->plan.team_count);
  a.tile = tile;
  a.shape = *shape;
  a.blocks_per_tile = (a.plan.slots_per_tile + shape->slots - 1) / shape->slots;
  /* f32 V is read in place unless pages break its rows' fixed stride. */
  a.stage_v = p->v.dtype != FLASHCPU_DTYPE_F32 || p->v.pages != NULL;
  return fc_prefill_plan_args(env, plan, &a, sizeof a, scratch_for_team);
}
