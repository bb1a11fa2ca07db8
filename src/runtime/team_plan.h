/* The team plan: which thread runs on which core, and which threads form a
 * team (the CPU's threadgroup). Pure function of the topology and the
 * options, so tests check it on synthetic and XML topologies. */
#ifndef FLASHCPU_RUNTIME_TEAM_PLAN_H
#define FLASHCPU_RUNTIME_TEAM_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "flashcpu/flashcpu.h"
#include "runtime/topology.h"

typedef struct fc_thread_place {
  int team, rank;  /* team index and the thread's index inside it */
  int core;        /* index into fc_topology.cores */
  int pu_os_index; /* the PU it is pinned to */
} fc_thread_place;

typedef struct fc_team_info {
  int first_thread, size; /* threads [first_thread, first_thread + size) */
  int numa_os_index;      /* NUMA node of its cores, -1 when unknown */
  hwloc_obj_t domain;     /* the core, cache or NUMA node the team shares */
  size_t cache_bytes;     /* the team's share of the cache it works in */
  size_t scratch_bytes;   /* scratch to allocate for it */
} fc_team_info;

typedef struct fc_team_plan {
  int thread_count, team_count;
  flashcpu_team_level level; /* resolved: never AUTO */
  bool pinned;               /* threads get bound to their PUs */
  fc_thread_place *threads;  /* ordered by team, then rank */
  fc_team_info *teams;
} fc_team_plan;

/* Smallest scratch a team gets, whatever its cache says. */
#define FC_MIN_TEAM_SCRATCH ((size_t)256 * 1024)

/* Returns 0, or -1 with a message. max_team_size 0 means no limit. */
int fc_team_plan_build(const fc_topology *topology, int thread_count,
                       flashcpu_team_level level, int max_team_size,
                       fc_team_plan *plan, char *error, size_t error_size);
void fc_team_plan_free(fc_team_plan *plan);

/* "core", "L2", "L3", "NUMA" ("auto" for AUTO). */
const char *fc_team_level_name(flashcpu_team_level level);

#endif
