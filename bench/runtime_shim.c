/* See runtime_shim.h. */
#include "runtime_shim.h"

#include <stdlib.h>

#include "runtime/runtime.h"

struct runtime_shim {
  fc_runtime runtime;
};

static void empty_tile(void *args, int64_t tile, const fc_team_view *team) {
  (void)args;
  (void)tile;
  (void)team;
}

static void barrier_tile(void *args, int64_t tile, const fc_team_view *team) {
  (void)tile;
  const int barriers = *(const int *)args;
  for (int i = 0; i < barriers; i++) fc_barrier_wait(team->barrier);
}

runtime_shim *runtime_shim_create(int threads, bool pool,
                                  flashcpu_team_level level) {
  runtime_shim *shim = calloc(1, sizeof *shim);
  if (!shim) return NULL;
  const fc_launch_mode mode = pool ? FC_LAUNCH_POOL : FC_LAUNCH_REGION;
  fc_runtime_options options = {NULL, threads, level, 0, mode};
  char error[256];
  if (fc_runtime_create(&shim->runtime, &options, error, sizeof error) != 0) {
    free(shim);
    return NULL;
  }
  if (shim->runtime.mode != mode) { /* the pool fell back to regions */
    runtime_shim_destroy(shim);
    return NULL;
  }
  return shim;
}

void runtime_shim_destroy(runtime_shim *shim) {
  if (!shim) return;
  fc_runtime_destroy(&shim->runtime);
  free(shim);
}

int runtime_shim_team_count(const runtime_shim *shim) {
  return shim->runtime.plan.team_count;
}

int runtime_shim_first_team_size(const runtime_shim *shim) {
  return shim->runtime.plan.teams[0].size;
}

int runtime_shim_launch_empty(runtime_shim *shim) {
  fc_launch launch = {empty_tile, NULL, shim->runtime.plan.team_count, true,
                      NULL};
  return fc_runtime_launch(&shim->runtime, &launch);
}

int runtime_shim_launch_barriers(runtime_shim *shim, int barriers) {
  fc_launch launch = {barrier_tile, &barriers, shim->runtime.plan.team_count,
                      true, NULL};
  return fc_runtime_launch(&shim->runtime, &launch);
}
