/* How many slots a prefill tile takes. Larger tiles amortise a kernel's
 * K/V staging (one pass per KV block and tile) over more rows; smaller ones
 * balance the teams better where a problem has few tiles. Between the
 * kernel's own size and the default, halving, the choice is the size whose
 * heaviest-first schedule (what the launch runs) finishes first by a cost
 * model: a tile costs its visible (row, key) pairs plus, per KV block it
 * stages, about one register block's step; ragged batches (a paged call's
 * requests) are simulated on the tiles fc_prefill_plan_args lays out for
 * them. No slot's arithmetic depends on the tiles (KV blocks are aligned
 * to absolute keys), so the bytes do not either. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/mask.h"
#include "kernels/prefill/prefill_driver.h"

enum {
  FC_TILE_SIZE_MAX_TILES = 2048, /* simulated schedules stay this small */
  FC_TILE_SIZE_MAX_TEAMS = 512
};

/* A tile's estimated cost, in (query slot, key) pairs. */
static double tile_cost(const fc_problem *p, const fc_prefill_plan *plan,
                        const fc_prefill_shape *shape, int64_t tile) {
  const fc_prefill_tile at = fc_prefill_locate(p, plan, tile);
  const int64_t kv_length = fc_problem_kv_length(p, at.b);
  const fc_key_range first = fc_row_key_range(p, at.b, kv_length, at.row_begin);
  const fc_key_range last =
      fc_row_key_range(p, at.b, kv_length, at.row_end - 1);
  const int64_t rows = at.row_end - at.row_begin;
  if (last.end <= first.begin) return 0.0;
  /* the rows' ranges slide from first to last: a trapezoid */
  const double pairs =
      0.5 * (double)rows *
      (double)((first.end - first.begin) + (last.end - last.begin));
  const int64_t blocks =
      (last.end - first.begin + shape->kv_block - 1) / shape->kv_block;
  return pairs * (double)p->group +
         (double)blocks * (double)shape->kv_block * (double)shape->slots;
}

static int by_cost_descending(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

/* When the last team finishes if each tile, heaviest first, goes to the
 * least loaded of `teams`; -1 if the problem is too large to simulate. */
static double makespan(const fc_problem *p, const fc_prefill_plan *plan,
                       const fc_prefill_shape *shape, int teams) {
  const int64_t n = plan->tile_count;
  if (n > FC_TILE_SIZE_MAX_TILES || teams > FC_TILE_SIZE_MAX_TEAMS) return -1;
  double cost[FC_TILE_SIZE_MAX_TILES], load[FC_TILE_SIZE_MAX_TEAMS];
  for (int64_t t = 0; t < n; t++) cost[t] = tile_cost(p, plan, shape, t);
  qsort(cost, (size_t)n, sizeof cost[0], by_cost_descending);
  /* load[] is a min-heap */
  for (int i = 0; i < teams; i++) load[i] = 0.0;
  for (int64_t t = 0; t < n; t++) {
    double value = load[0] + cost[t];
    int i = 0;
    for (;;) { /* sift the root down */
      int child = 2 * i + 1;
      if (child >= teams) break;
      if (child + 1 < teams && load[child + 1] < load[child]) child++;
      if (load[child] >= value) break;
      load[i] = load[child];
      i = child;
    }
    load[i] = value;
  }
  double largest = 0.0;
  for (int i = 0; i < teams; i++)
    largest = load[i] > largest ? load[i] : largest;
  return largest;
}

/* plan's tiles as the launch will see them: for a ragged batch, each
 * batch's first tile in starts (room for FC_TILE_SIZE_MAX_TILES + 1), as
 * fc_prefill_plan_args lays them out; false where they are too many to
 * simulate. */
static bool simulated_tiles(const fc_problem *p, fc_prefill_plan *plan,
                            int64_t *starts) {
  if (!p->q_lens) return plan->tile_count <= FC_TILE_SIZE_MAX_TILES;
  if (p->batch > FC_TILE_SIZE_MAX_TILES) return false;
  starts[0] = 0;
  for (int64_t b = 0; b < p->batch; b++) {
    const int64_t rows = p->q_lens[b];
    starts[b + 1] =
        starts[b] +
        p->kv_heads * ((rows + plan->rows_per_tile - 1) / plan->rows_per_tile);
    if (starts[b + 1] > FC_TILE_SIZE_MAX_TILES) return false;
  }
  plan->tile_starts = starts;
  plan->tile_count = starts[p->batch];
  return true;
}

fc_prefill_plan fc_prefill_plan_tiles(const fc_problem *p,
                                      const fc_prefill_shape *shape,
                                      int teams) {
  int64_t slots =
      shape->tile_slots > 0 ? shape->tile_slots : FC_PREFILL_TILE_SLOTS;
  fc_prefill_plan best = fc_prefill_plan_for(p, slots);
  if (slots / 2 < FC_PREFILL_TILE_SLOTS) return best;
  int64_t starts[FC_TILE_SIZE_MAX_TILES + 1];
  fc_prefill_plan tiles = best;
  if (!simulated_tiles(p, &tiles, starts)) return best;
  /* plenty of tiles: the largest balance well enough */
  if (tiles.tile_count >= 8 * (int64_t)teams) return best;
  double best_time = makespan(p, &tiles, shape, teams);
  while (best_time >= 0.0 && slots / 2 >= FC_PREFILL_TILE_SLOTS) {
    slots /= 2;
    const fc_prefill_plan plan = fc_prefill_plan_for(p, slots);
    tiles = plan;
    if (!simulated_tiles(p, &tiles, starts)) break;
    const double time = makespan(p, &tiles, shape, teams);
    if (time < 0.0) break;
    if (time < best_time) {
      best = plan; /* ragged: fc_prefill_plan_args lays out its tiles */
      best_time = time;
    }
  }
  return best;
}
