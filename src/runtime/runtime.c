/* Runtime: thread i of a launch (from a parallel region or the persistent
 * pool) is thread i of the team plan; workers bind themselves to their PU
 * the first time they serve this runtime, so later launches pay no binding
 * cost. The caller is never bound: where it runs on a worker's PU, the two
 * swap places for the launch (caller_place). */
#define _GNU_SOURCE /* sched_getcpu */
#include "runtime/runtime.h"

#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_ullong next_runtime_id = 1;

/* Which runtime and PU this OS thread was last bound for. */
static _Thread_local uint64_t bound_runtime_id;
static _Thread_local int bound_pu = -1;

static void *scratch_alloc(const fc_runtime *runtime, int team, size_t bytes,
                           bool *numa_bound) {
  const fc_team_info *info = &runtime->plan.teams[team];
  *numa_bound = false;
  if (runtime->topology.can_bind_memory && info->numa_os_index >= 0) {
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(
        runtime->topology.hw, (unsigned)info->numa_os_index);
    if (node) {
      void *memory =
          hwloc_alloc_membind(runtime->topology.hw, bytes, node->nodeset,
                              HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
      if (memory) {
        *numa_bound = true;
        return memory;
      }
    }
  }
  return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void scratch_free(const fc_runtime *runtime, fc_team_state *team) {
  if (!team->scratch) return;
  if (team->scratch_numa_bound)
    hwloc_free(runtime->topology.hw, team->scratch, team->scratch_bytes);
  else
    free(team->scratch);
  team->scratch = NULL;
  team->scratch_bytes = 0;
}

int fc_runtime_reserve_scratch(fc_runtime *runtime, size_t bytes) {
  for (int t = 0; t < runtime->plan.team_count; t++) {
    fc_team_state *team = &runtime->teams[t];
    if (team->scratch_bytes >= bytes) continue;
    bool numa_bound;
    void *memory = scratch_alloc(runtime, t, bytes, &numa_bound);
    if (!memory) return -1;
    scratch_free(runtime, team);
    team->scratch = memory;
    team->scratch_bytes = bytes;
    team->scratch_numa_bound = numa_bound;
  }
  return 0;
}

int fc_runtime_reserve_call_workspace(fc_runtime *runtime, size_t bytes) {
  if (runtime->call_workspace_bytes >= bytes) return 0;
  void *memory = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!memory) return -1;
  free(runtime->call_workspace);
  runtime->call_workspace = memory;
  runtime->call_workspace_bytes = bytes;
  return 0;
}

int fc_runtime_create(fc_runtime *runtime, const fc_runtime_options *options,
                      char *error, size_t error_size) {
  memset(runtime, 0, sizeof *runtime);
  runtime->id = atomic_fetch_add(&next_runtime_id, 1);
  if (fc_topology_load(options->source, &runtime->topology, error,
                       error_size) != 0)
    return -1;
  int threads = options->thread_count > 0 ? options->thread_count
                                          : runtime->topology.core_count;
  if (fc_team_plan_build(&runtime->topology, threads, options->level,
                         options->max_team_size, &runtime->plan, error,
                         error_size) != 0) {
    fc_runtime_destroy(runtime);
    return -1;
  }
  runtime->teams =
      calloc((size_t)runtime->plan.team_count, sizeof *runtime->teams);
  if (!runtime->teams) {
    fc_runtime_destroy(runtime);
    snprintf(error, error_size, "out of memory for the team state");
    return FC_RUNTIME_OUT_OF_MEMORY;
  }
  size_t smallest = runtime->plan.teams[0].scratch_bytes;
  /* A synthetic topology may promise more PUs than the machine has. */
  int oversubscribed = runtime->plan.thread_count >
                           hwloc_bitmap_weight(runtime->topology.allowed) ||
                       runtime->plan.thread_count > omp_get_num_procs();
  for (int t = 0; t < runtime->plan.team_count; t++) {
    fc_barrier_init(&runtime->teams[t].barrier, runtime->plan.teams[t].size,
                    oversubscribed);
    if (runtime->plan.teams[t].scratch_bytes < smallest)
      smallest = runtime->plan.teams[t].scratch_bytes;
  }
  if (fc_runtime_reserve_scratch(runtime, smallest) != 0) {
    fc_runtime_destroy(runtime);
    snprintf(error, error_size, "out of memory for %zu bytes of team scratch",
             smallest);
    return FC_RUNTIME_OUT_OF_MEMORY;
  }
  runtime->mode = FC_LAUNCH_REGION;
  if (options->host) {
    runtime->host = *options->host;
    runtime->mode = FC_LAUNCH_HOST;
  } else if (options->mode == FC_LAUNCH_POOL) {
    runtime->pool = fc_pool_start(runtime->plan.thread_count);
    if (runtime->pool) runtime->mode = FC_LAUNCH_POOL;
  }
  return 0;
}

void fc_runtime_destroy(fc_runtime *runtime) {
  if (!runtime) return;
  fc_pool_stop(runtime->pool);
  for (int t = 0; runtime->teams && t < runtime->plan.team_count; t++)
    scratch_free(runtime, &runtime->teams[t]);
  free(runtime->teams);
  free(runtime->tile_order);
  free(runtime->call_workspace);
  fc_team_plan_free(&runtime->plan);
  fc_topology_free(&runtime->topology);
  memset(runtime, 0, sizeof *runtime);
}

static void bind_this_thread(const fc_runtime *runtime, int pu) {
  if (bound_runtime_id == runtime->id && bound_pu == pu) return;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) return;
  hwloc_bitmap_only(set, (unsigned)pu);
  /* Binding is an optimisation: on failure the thread just runs unpinned. */
  if (hwloc_set_cpubind(runtime->topology.hw, set, HWLOC_CPUBIND_THREAD) == 0) {
    bound_runtime_id = runtime->id;
    bound_pu = pu;
  }
  hwloc_bitmap_free(set);
}

typedef struct weighted_tile {
  int64_t weight, tile;
} weighted_tile;

/* Heaviest first; ties by tile index so that the order is reproducible. */
static int heavier_first(const void *a, const void *b) {
  const weighted_tile *x = a, *y = b;
  if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
  return x->tile < y->tile ? -1 : (x->tile > y->tile);
}

int fc_runtime_reserve_tile_order(fc_runtime *runtime, int64_t count) {
  if (runtime->tile_order_capacity >= count) return 0;
  weighted_tile *grown =
      realloc(runtime->tile_order, (size_t)count * sizeof(weighted_tile));
  if (!grown) return -1;
  runtime->tile_order = grown;
  runtime->tile_order_capacity = count;
  return 0;
}

/* Fills runtime->tile_order with the tiles heaviest first. */
static int prepare_order(fc_runtime *runtime, const fc_launch *launch) {
  if (!launch->weight || launch->static_schedule) return 0;
  int64_t count = launch->tile_count;
  if (fc_runtime_reserve_tile_order(runtime, count) != 0) return -1;
  weighted_tile *order = runtime->tile_order;
  for (int64_t i = 0; i < count; i++)
    order[i] = (weighted_tile){launch->weight(launch->args, i), i};
  qsort(order, (size_t)count, sizeof *order, heavier_first);
  return 0;
}

/* The PU the calling thread runs on, -1 where the OS cannot tell. */
static int current_pu(void) {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

/* Where the caller launches from a worker's PU, that worker and the caller
 * swap places: the caller is never moved (the host may have bound it
 * there), and without the swap the two would share one core for the whole
 * call (a caller bound there made 16-thread decode 1.8x slower on 16
 * cores, docs/performance.md). The worker rebinds to the caller's planned
 * PU as its launch starts. */
static void place_caller(fc_runtime *runtime) {
  const fc_team_plan *plan = &runtime->plan;
  if (!plan->pinned || runtime->mode == FC_LAUNCH_HOST ||
      plan->thread_count < 2)
    return;
  const int pu = current_pu();
  if (pu < 0) return;
  for (int t = 0; t < plan->thread_count; t++)
    if (plan->threads[t].pu_os_index == pu) {
      runtime->caller_place = t;
      return;
    }
  runtime->caller_place = 0; /* on a PU no thread is planned for */
}

/* The plan's place of launch thread `thread` (the caller is thread 0). */
static int place_of(const fc_runtime *runtime, int thread) {
  if (thread == 0) return runtime->caller_place;
  return thread == runtime->caller_place ? 0 : thread;
}

/* What one thread does in a launch. */
static void serve(fc_runtime *runtime, const fc_launch *launch,
                  const fc_team_view *view, atomic_llong *next_tile,
                  const weighted_tile *order) {
  fc_team_state *state = &runtime->teams[view->team];
  if (launch->static_schedule) {
    for (int64_t tile = view->team; tile < launch->tile_count;
         tile += view->team_count)
      launch->kernel(launch->args, tile, view);
    return;
  }
  for (;;) {
    if (view->rank == 0)
      state->current_tile =
          atomic_fetch_add_explicit(next_tile, 1, memory_order_relaxed);
    fc_barrier_wait(view->barrier); /* publishes current_tile */
    int64_t slot = state->current_tile;
    fc_barrier_wait(view->barrier); /* all read it before rank 0 moves on */
    if (slot >= launch->tile_count) return;
    launch->kernel(launch->args, order ? order[slot].tile : slot, view);
  }
}

/* Everything a launch's threads share. */
typedef struct launch_state {
  fc_runtime *runtime;
  const fc_launch *launch;
  const weighted_tile *order;
  atomic_llong next_tile;
} launch_state;

static void launch_thread(void *opaque, int thread) {
  launch_state *state = opaque;
  fc_runtime *runtime = state->runtime;
  const fc_team_plan *plan = &runtime->plan;
  const fc_thread_place *place = &plan->threads[place_of(runtime, thread)];
  /* The caller's thread is thread 0 and is never bound: its affinity is the
   * engine's business, and binding and restoring it would cost three system
   * calls (~4.5 us measured) per launch. */
  if (plan->pinned && thread != 0 && runtime->mode != FC_LAUNCH_HOST)
    bind_this_thread(runtime, place->pu_os_index);
  fc_team_state *team = &runtime->teams[place->team];
  fc_team_view view = {
      place->team,   plan->team_count, plan->teams[place->team].size,
      place->rank,   team->scratch,    team->scratch_bytes,
      &team->barrier};
  serve(runtime, state->launch, &view, &state->next_tile, state->order);
}

/* OpenMP gave fewer threads (nested region, thread limit): the calling
 * thread runs every tile as a team of one with team 0's scratch. */
static void launch_alone(launch_state *state) {
  fc_barrier solo;
  fc_barrier_init(&solo, 1, 0);
  fc_team_state *team = &state->runtime->teams[0];
  fc_team_view view = {0, 1, 1, 0, team->scratch, team->scratch_bytes, &solo};
  const fc_launch *launch = state->launch;
  for (int64_t slot = 0; slot < launch->tile_count; slot++)
    launch->kernel(launch->args, state->order ? state->order[slot].tile : slot,
                   &view);
}

/* One thread of the host's region: as in our own region below. */
static void host_region_thread(void *opaque) {
  launch_state *state = opaque;
  const flashcpu_host_openmp *host = &state->runtime->host;
  if (host->num_threads() == state->runtime->plan.thread_count)
    launch_thread(state, host->thread_num());
  else if (host->thread_num() == 0)
    launch_alone(state);
}

/* Runs launch on the teams, its dynamic tiles in `order` (NULL: index
 * order). */
static void run_launch(fc_runtime *runtime, const fc_launch *launch,
                       const weighted_tile *order) {
  place_caller(runtime);
  launch_state state;
  state.runtime = runtime;
  state.launch = launch;
  state.order = order;
  atomic_init(&state.next_tile, 0);
  const fc_team_plan *plan = &runtime->plan;
  if (runtime->mode == FC_LAUNCH_POOL) {
    /* Teams of one thread taking tiles from a shared counter: any subset
     * of the threads finishes the launch, so it need not wait for workers
     * still waking (docs/performance.md, Runtime overheads). */
    const bool any_threads =
        !launch->static_schedule && plan->team_count == plan->thread_count;
    fc_pool_run(runtime->pool, launch_thread, &state, any_threads);
  } else if (plan->thread_count == 1) {
    launch_thread(&state, 0);
  } else if (runtime->mode == FC_LAUNCH_HOST) {
    runtime->host.parallel(host_region_thread, &state,
                           (unsigned)plan->thread_count, 0);
  } else {
#pragma omp parallel num_threads(plan->thread_count)
    {
      if (omp_get_num_threads() == plan->thread_count)
        launch_thread(&state, omp_get_thread_num());
      else if (omp_get_thread_num() == 0)
        launch_alone(&state);
    }
  }
}

void fc_runtime_wake(fc_runtime *runtime) {
  if (runtime->mode == FC_LAUNCH_POOL && runtime->pool)
    fc_pool_alert(runtime->pool);
}

int fc_runtime_launch(fc_runtime *runtime, const fc_launch *launch) {
  if (launch->tile_count <= 0) return 0;
  if (prepare_order(runtime, launch) != 0) return -1;
  run_launch(runtime, launch,
             launch->weight && !launch->static_schedule ? runtime->tile_order
                                                        : NULL);
  return 0;
}

/* What the paired launch's tiles call: first's tiles, then second's. */
typedef struct launch_pair {
  const fc_launch *first, *second;
} launch_pair;

static void pair_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const launch_pair *pair = opaque;
  const int64_t split = pair->first->tile_count;
  if (tile < split)
    pair->first->kernel(pair->first->args, tile, team);
  else
    pair->second->kernel(pair->second->args, tile - split, team);
}

/* Tiles of one launch keyed by how far through it they come: index order,
 * or heaviest first where it has weights. */
static void key_by_progress(const fc_launch *launch, int64_t offset,
                            weighted_tile *keys) {
  const int64_t count = launch->tile_count;
  for (int64_t i = 0; i < count; i++)
    keys[i] = (weighted_tile){
        launch->weight ? launch->weight(launch->args, i) : count - i, i};
  qsort(keys, (size_t)count, sizeof *keys, heavier_first);
  /* The i-th of count comes at (i + 1/2) / count of the way: a later tile
   * gets a smaller key, so that the descending sort below interleaves. */
  for (int64_t i = 0; i < count; i++) {
    const double progress = ((double)i + 0.5) / (double)count;
    keys[i].weight = (int64_t)((1.0 - progress) * 4611686018427387904.0);
    keys[i].tile += offset;
  }
}

int fc_runtime_launch_pair(fc_runtime *runtime, const fc_launch *first,
                           const fc_launch *second) {
  if (first->tile_count <= 0) return fc_runtime_launch(runtime, second);
  if (second->tile_count <= 0) return fc_runtime_launch(runtime, first);
  const int64_t total = first->tile_count + second->tile_count;
  if (fc_runtime_reserve_tile_order(runtime, total) != 0) return -1;
  weighted_tile *order = runtime->tile_order;
  key_by_progress(first, 0, order);
  key_by_progress(second, first->tile_count, order + first->tile_count);
  qsort(order, (size_t)total, sizeof *order, heavier_first);
  launch_pair pair = {first, second};
  fc_launch both = {pair_tile, &pair, total, false, NULL};
  run_launch(runtime, &both, order);
  return 0;
}
