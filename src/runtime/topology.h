/* The machine as hwloc sees it, restricted to the CPUs this process may use.
 * Loaded once per context. Tests load synthetic or XML topologies instead. */
#ifndef FLASHCPU_RUNTIME_TOPOLOGY_H
#define FLASHCPU_RUNTIME_TOPOLOGY_H

#include <hwloc.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct fc_topology_source {
  const char *synthetic;      /* hwloc synthetic description, or NULL */
  const char *xml_path;       /* hwloc XML file, or NULL */
  const char *allowed_cpuset; /* PU list like "0-3,8" (OS indices) that
                                 replaces the process binding, or NULL */
} fc_topology_source;

/* One core the process may run on, in hwloc's logical order. */
typedef struct fc_core {
  hwloc_obj_t object;     /* the core (or the PU when hwloc has no cores) */
  hwloc_bitmap_t allowed; /* its PUs that the process may use */
  int allowed_pus;
} fc_core;

typedef struct fc_topology {
  hwloc_topology_t hw;
  hwloc_bitmap_t allowed; /* allowed cpuset (cgroup) intersected with the
                             process binding (taskset) or the given list */
  fc_core *cores;
  int core_count;
  bool can_bind_threads; /* the OS supports binding (not synthetic/XML) */
  bool can_bind_memory;
} fc_topology;

/* Loads the topology. Returns 0, or -1 with a message in error. */
int fc_topology_load(const fc_topology_source *source, fc_topology *topology,
                     char *error, size_t error_size);
void fc_topology_free(fc_topology *topology);

#endif
