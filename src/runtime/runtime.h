/* The runtime a context owns: topology, team plan, per-team scratch and
 * barriers, and the launcher that runs tile kernels on the teams. */
#ifndef FLASHCPU_RUNTIME_RUNTIME_H
#define FLASHCPU_RUNTIME_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/launch.h"
#include "runtime/pool.h"
#include "runtime/team_plan.h"
#include "runtime/topology.h"

typedef struct fc_team_state {
  fc_barrier barrier;
  FC_ALIGNAS(64)
  int64_t current_tile; /* written by rank 0, read after a
                         barrier by the others */
  void *scratch;
  size_t scratch_bytes;
  bool scratch_numa_bound;
} fc_team_state;

/* How a launch gets its threads. */
typedef enum fc_launch_mode {
  FC_LAUNCH_REGION, /* an OpenMP parallel region per launch */
  FC_LAUNCH_POOL,   /* persistent OpenMP threads parked between launches */
  FC_LAUNCH_HOST    /* a parallel region of the host's OpenMP runtime */
} fc_launch_mode;

typedef struct fc_runtime {
  fc_topology topology;
  fc_launch_mode mode;
  fc_pool *pool;             /* FC_LAUNCH_POOL only */
  flashcpu_host_openmp host; /* FC_LAUNCH_HOST only */
  fc_team_plan plan;
  fc_team_state *teams;
  struct weighted_tile *tile_order; /* heaviest first, grown on demand */
  int64_t tile_order_capacity;
  /* One call's workspace that outlives a launch (split-KV partial states
   * between its compute and merge launches), grown on demand. */
  void *call_workspace;
  size_t call_workspace_bytes;
  uint64_t id; /* tells pinned threads which runtime pinned them */
  /* The plan's thread whose place the caller (thread 0) takes, and which
   * takes thread 0's place in turn: the one pinned to the core the caller
   * last launched from (0: none, every thread in its own place). */
  int caller_place;
} fc_runtime;

typedef struct fc_runtime_options {
  const fc_topology_source *source; /* NULL: this machine */
  int thread_count;                 /* 0: one per allowed core */
  flashcpu_team_level level;
  int max_team_size;
  fc_launch_mode mode; /* falls back to REGION if the pool cannot start */
  const flashcpu_host_openmp *host; /* not NULL: FC_LAUNCH_HOST on it */
} fc_runtime_options;

/* Returns 0, or with a message in error: FC_RUNTIME_OUT_OF_MEMORY, or -1
 * for anything else (topology, plan). */
#define FC_RUNTIME_OUT_OF_MEMORY (-2)
int fc_runtime_create(fc_runtime *runtime, const fc_runtime_options *options,
                      char *error, size_t error_size);
void fc_runtime_destroy(fc_runtime *runtime);

/* Makes every team's scratch at least bytes large (allocating only when it
 * grows). Returns 0, or -1 when out of memory (scratch is then unchanged). */
int fc_runtime_reserve_scratch(fc_runtime *runtime, size_t bytes);

/* Makes runtime->call_workspace at least bytes large (64-byte aligned,
 * contents undefined). Returns 0, or -1 when out of memory (unchanged). */
int fc_runtime_reserve_call_workspace(fc_runtime *runtime, size_t bytes);

/* Makes room for a weighted launch of count tiles (allocating only when it
 * grows). Returns 0, or -1 when out of memory. */
int fc_runtime_reserve_tile_order(fc_runtime *runtime, int64_t count);

/* Wakes the pool's sleeping workers ahead of a launch (nothing in region
 * or host mode, or with one thread). */
void fc_runtime_wake(fc_runtime *runtime);

/* Runs the launch on all teams and returns when every tile is done.
 * Returns 0, or -1 when out of memory for the tile order (nothing ran). */
int fc_runtime_launch(fc_runtime *runtime, const fc_launch *launch);

/* Runs two dynamic launches as one: their tiles (each launch's heaviest
 * first where it has weights) interleaved so that both run all along and
 * end together, e.g. memory-bound decode tiles beside compute-bound
 * prefill tiles. Needs tile order room for both (-1 if it cannot grow). */
int fc_runtime_launch_pair(fc_runtime *runtime, const fc_launch *first,
                           const fc_launch *second);

#endif
