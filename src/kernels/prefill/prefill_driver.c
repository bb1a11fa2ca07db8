#include "kernels/prefill/prefill_driver.h"

#include <stddef.h>

#include "common/mask.h"
#include "common/score.h"
#include "kernels/kernel_support.h"

fc_prefill_plan fc_prefill_plan_for(const fc_problem *p,
                                    int64_t target_slots) {
  fc_prefill_plan plan;
  int64_t rows = target_slots / p->group;
  if (rows < 1) rows = 1;
  if (rows > p->q_len) rows = p->q_len;
  plan.rows_per_tile = rows;
  plan.tiles_per_head = (p->q_len + rows - 1) / rows;
  plan.tile_count = p->batch * p->kv_heads * plan.tiles_per_head;
  plan.slots_per_tile = rows * p->group;
  plan.scores_final = p->softcap == 0.0f && p->additive == NULL;
  plan.q_factor = plan.scores_final ? p->scale * FC_LOG2E_F : p->scale;
  return plan;
}

fc_prefill_tile fc_prefill_locate(const fc_problem *p,
                                  const fc_prefill_plan *plan, int64_t tile) {
  const int64_t per_batch = p->kv_heads * plan->tiles_per_head;
  fc_prefill_tile at;
  at.b = tile / per_batch;
  at.kv_head = (tile % per_batch) / plan->tiles_per_head;
  at.row_begin = (tile % plan->tiles_per_head) * plan->rows_per_tile;
  at.row_end = at.row_begin + plan->rows_per_tile < p->q_len
                   ? at.row_begin + plan->rows_per_tile
                   : p->q_len;
  return at;
}

/* What the launch's callbacks see: the kernel's own args behind them. */
typedef struct prefill_launch_args {
  const fc_problem *p;
  const fc_prefill_plan *plan;
  fc_tile_kernel kernel;
  void *args;
} prefill_launch_args;

static void run_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const prefill_launch_args *launch = opaque;
  launch->kernel(launch->args, tile, team);
}

/* Keys a tile's rows see: what the heaviest-first order sorts by. */
static int64_t tile_weight(const void *opaque, int64_t tile) {
  const prefill_launch_args *launch = opaque;
  const fc_problem *p = launch->p;
  const fc_prefill_tile at = fc_prefill_locate(p, launch->plan, tile);
  int64_t kv_length = fc_problem_kv_length(p, at.b);
  fc_key_range first = fc_row_key_range(p, kv_length, at.row_begin);
  fc_key_range last = fc_row_key_range(p, kv_length, at.row_end - 1);
  return (last.end - first.begin) * (at.row_end - at.row_begin);
}

flashcpu_status fc_prefill_launch(const fc_kernel_env *env,
                                  const fc_problem *p,
                                  const fc_prefill_plan *plan,
                                  fc_tile_kernel kernel, void *args) {
  prefill_launch_args launch_args = {p, plan, kernel, args};
  /* Masks that limit rows unevenly make tiles uneven: heaviest first. */
  bool uneven = p->causal || p->window_left >= 0 || p->window_right >= 0 ||
                p->kv_lengths;
  fc_launch launch = {run_tile, &launch_args, plan->tile_count, false,
                      uneven ? tile_weight : NULL};
  if (fc_runtime_launch(env->runtime, &launch) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory ordering %lld tiles",
                          (long long)plan->tile_count);
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

/* The team's KV block, then one flag per rank. */
static size_t shared_floats(const fc_prefill_args *a, int team_size) {
  const fc_problem *p = a->p;
  return round_floats(
             (size_t)(a->shape.kv_block * (p->head_dim + p->v_head_dim))) +
         (size_t)team_size * FC_PREFILL_FLAG_STRIDE;
}

static size_t rank_floats(const fc_prefill_args *a, int team_size) {
  const fc_problem *p = a->p;
  const size_t slots = (size_t)a->shape.slots;
  size_t blocks = (size_t)blocks_of_rank(a, team_size);
  size_t per_block = (size_t)(p->head_dim + p->v_head_dim + 2) * slots;
  size_t row = (size_t)(p->head_dim > p->v_head_dim ? p->head_dim
                                                    : p->v_head_dim);
  return round_floats(blocks * per_block +
                      2 * (size_t)a->shape.kv_block * slots + 4 * slots + row);
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
  const fc_problem *p = a->p;
  const size_t slots = (size_t)a->shape.slots;
  const size_t kv_block = (size_t)a->shape.kv_block;
  const size_t blocks = (size_t)blocks_of_rank(a, team->size);
  float *shared = (float *)(((uintptr_t)team->scratch + 63) & ~(uintptr_t)63);
  fc_prefill_scratch s;
  s.k_stage = shared;
  s.v_stage = shared + kv_block * (size_t)p->head_dim;
  s.flags = (int *)(shared + round_floats(kv_block * (size_t)(p->head_dim +
                                                              p->v_head_dim)));
  s.qt = shared + shared_floats(a, team->size) +
         (size_t)team->rank * rank_floats(a, team->size);
  s.ot = s.qt + blocks * (size_t)p->head_dim * slots;
  s.m = s.ot + blocks * (size_t)p->v_head_dim * slots;
  s.l = s.m + blocks * slots;
  s.st = s.l + blocks * slots;
  s.hidden = s.st + kv_block * slots;
  s.alpha = s.hidden + kv_block * slots;
  s.begin = s.alpha + slots;
  s.end = s.begin + slots;
  s.mask_offsets = (int32_t *)(s.end + slots);
  s.row = s.end + 2 * slots;
  return s;
}

flashcpu_status fc_prefill_run(const fc_kernel_env *env, const fc_problem *p,
                               const fc_prefill_shape *shape,
                               fc_tile_kernel tile) {
  fc_prefill_args a;
  a.p = p;
  a.row_to_f32 = env->row_to_f32;
  a.plan = fc_prefill_plan_for(p, FC_PREFILL_TILE_SLOTS);
  a.shape = *shape;
  a.blocks_per_tile = (a.plan.slots_per_tile + shape->slots - 1) / shape->slots;
  a.stage_v = p->v.dtype != FLASHCPU_DTYPE_F32;
  flashcpu_status status =
      fc_kernel_reserve_scratch(env, scratch_for_team, &a);
  if (status != FLASHCPU_OK) return status;
  return fc_prefill_launch(env, p, &a.plan, tile, &a);
}
