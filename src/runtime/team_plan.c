/* Team planning: threads go one per allowed core in hwloc's logical order
 * (then onto further hyperthreads of the same cores), and the threads whose
 * cores share the level's object (core, L2, L3, NUMA node) form a team,
 * split into teams of at most max_team_size. */
#include "runtime/team_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fc_team_level_name(flashcpu_team_level level) {
  switch (level) {
  case FLASHCPU_TEAM_AUTO:
    return "auto";
  case FLASHCPU_TEAM_CORE:
    return "core";
  case FLASHCPU_TEAM_L2:
    return "L2";
  case FLASHCPU_TEAM_L3:
    return "L3";
  case FLASHCPU_TEAM_NUMA:
    return "NUMA";
  }
  return "unknown";
}

static hwloc_obj_t ancestor_of_type(hwloc_obj_t obj, hwloc_obj_type_t type) {
  for (hwloc_obj_t up = obj; up; up = up->parent)
    if (up->type == type) return up;
  return NULL;
}

static hwloc_obj_t numa_node_of(const fc_topology *topology, hwloc_obj_t obj) {
  hwloc_obj_t node = NULL;
  while ((node = hwloc_get_next_obj_by_type(topology->hw, HWLOC_OBJ_NUMANODE,
                                            node)))
    if (node->cpuset && hwloc_bitmap_intersects(node->cpuset, obj->cpuset))
      return node;
  return NULL;
}

/* The object a core's team shares; a missing cache level falls back to the
 * next wider one so that every core has a domain. */
static hwloc_obj_t domain_of(const fc_topology *topology, hwloc_obj_t core,
                             flashcpu_team_level level) {
  hwloc_obj_t domain = NULL;
  switch (level) {
  case FLASHCPU_TEAM_L2:
    domain = ancestor_of_type(core, HWLOC_OBJ_L2CACHE);
    break;
  case FLASHCPU_TEAM_L3:
    domain = ancestor_of_type(core, HWLOC_OBJ_L3CACHE);
    if (!domain) domain = ancestor_of_type(core, HWLOC_OBJ_PACKAGE);
    break;
  case FLASHCPU_TEAM_NUMA:
    domain = numa_node_of(topology, core);
    break;
  default:
    break;
  }
  if (!domain && level != FLASHCPU_TEAM_CORE && level != FLASHCPU_TEAM_L2)
    domain = hwloc_get_root_obj(topology->hw);
  return domain ? domain : core;
}

/* AUTO: L2 teams where an L2 is shared by several allowed cores. */
static flashcpu_team_level resolve_level(const fc_topology *topology,
                                         flashcpu_team_level level) {
  if (level != FLASHCPU_TEAM_AUTO) return level;
  for (int i = 1; i < topology->core_count; i++) {
    hwloc_obj_t here =
        ancestor_of_type(topology->cores[i].object, HWLOC_OBJ_L2CACHE);
    hwloc_obj_t before =
        ancestor_of_type(topology->cores[i - 1].object, HWLOC_OBJ_L2CACHE);
    if (here && here == before) return FLASHCPU_TEAM_L2;
  }
  return FLASHCPU_TEAM_CORE;
}

/* The round-th allowed PU of a core (wrapping), as an OS index. */
static int pu_of(const fc_core *core, int round) {
  int skip = round % core->allowed_pus;
  int index = hwloc_bitmap_first(core->allowed);
  while (skip-- > 0) index = hwloc_bitmap_next(core->allowed, index);
  return index;
}

/* The slice of the team's cache it may fill: private caches whole, shared
 * ones in proportion to the team's share of the cores below them. */
static size_t team_cache_bytes(const fc_topology *topology, hwloc_obj_t core,
                               flashcpu_team_level level, int team_size) {
  hwloc_obj_type_t type =
      level == FLASHCPU_TEAM_L3 || level == FLASHCPU_TEAM_NUMA
          ? HWLOC_OBJ_L3CACHE
          : HWLOC_OBJ_L2CACHE;
  hwloc_obj_t cache = ancestor_of_type(core, type);
  if (!cache) cache = ancestor_of_type(core, HWLOC_OBJ_L2CACHE);
  if (!cache || !cache->attr) return 0;
  int sharing = 0;
  for (int i = 0; i < topology->core_count; i++)
    if (hwloc_bitmap_isincluded(topology->cores[i].object->cpuset,
                                cache->cpuset))
      sharing++;
  size_t bytes = (size_t)cache->attr->cache.size;
  return sharing > team_size ? bytes / (size_t)sharing * (size_t)team_size
                             : bytes;
}

typedef struct placed {
  int thread, domain_order, core, pu;
} placed;

static int by_domain_then_thread(const void *a, const void *b) {
  const placed *x = a, *y = b;
  if (x->domain_order != y->domain_order)
    return x->domain_order < y->domain_order ? -1 : 1;
  return x->thread < y->thread ? -1 : (x->thread > y->thread);
}

int fc_team_plan_build(const fc_topology *topology, int thread_count,
                       flashcpu_team_level level, int max_team_size,
                       fc_team_plan *plan, char *error, size_t error_size) {
  memset(plan, 0, sizeof *plan);
  if (thread_count < 1 || max_team_size < 0) {
    snprintf(error, error_size, "thread count %d / team size %d invalid",
             thread_count, max_team_size);
    return -1;
  }
  plan->level = resolve_level(topology, level);
  plan->thread_count = thread_count;
  plan->pinned = topology->can_bind_threads;
  placed *order = calloc((size_t)thread_count, sizeof *order);
  hwloc_obj_t *domains = calloc((size_t)thread_count, sizeof *domains);
  plan->threads = calloc((size_t)thread_count, sizeof *plan->threads);
  plan->teams = calloc((size_t)thread_count, sizeof *plan->teams);
  if (!order || !domains || !plan->threads || !plan->teams) {
    free(order);
    free(domains);
    fc_team_plan_free(plan);
    snprintf(error, error_size, "out of memory planning teams");
    return -1;
  }

  int domain_count = 0;
  for (int t = 0; t < thread_count; t++) {
    int core = t % topology->core_count;
    hwloc_obj_t domain =
        domain_of(topology, topology->cores[core].object, plan->level);
    int d = 0;
    while (d < domain_count && domains[d] != domain) d++;
    if (d == domain_count) domains[domain_count++] = domain;
    order[t] = (placed){
        t, d, core, pu_of(&topology->cores[core], t / topology->core_count)};
  }
  qsort(order, (size_t)thread_count, sizeof *order, by_domain_then_thread);

  for (int i = 0; i < thread_count; i++) {
    bool new_team = i == 0 ||
                    order[i].domain_order != order[i - 1].domain_order ||
                    (max_team_size > 0 &&
                     plan->teams[plan->team_count - 1].size == max_team_size);
    if (new_team) {
      fc_team_info *team = &plan->teams[plan->team_count++];
      team->first_thread = i;
      team->domain = domains[order[i].domain_order];
      hwloc_obj_t node =
          numa_node_of(topology, topology->cores[order[i].core].object);
      team->numa_os_index = node ? (int)node->os_index : -1;
    }
    fc_team_info *team = &plan->teams[plan->team_count - 1];
    plan->threads[i] = (fc_thread_place){plan->team_count - 1, team->size,
                                         order[i].core, order[i].pu};
    team->size++;
  }
  for (int t = 0; t < plan->team_count; t++) {
    fc_team_info *team = &plan->teams[t];
    hwloc_obj_t core =
        topology->cores[plan->threads[team->first_thread].core].object;
    team->cache_bytes =
        team_cache_bytes(topology, core, plan->level, team->size);
    team->scratch_bytes = team->cache_bytes > FC_MIN_TEAM_SCRATCH
                              ? team->cache_bytes
                              : FC_MIN_TEAM_SCRATCH;
  }
  free(order);
  free(domains);
  return 0;
}

void fc_team_plan_free(fc_team_plan *plan) {
  if (!plan) return;
  free(plan->threads);
  free(plan->teams);
  memset(plan, 0, sizeof *plan);
}
