#include "runtime/topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *error, size_t error_size, const char *message,
                const char *detail) {
  snprintf(error, error_size, "%s%s%s", message, detail ? ": " : "",
           detail ? detail : "");
  return -1;
}

/* allowed := hwloc's allowed set (cgroups) & (given list or process binding) */
static int compute_allowed(const fc_topology_source *source,
                           fc_topology *topology, char *error,
                           size_t error_size) {
  topology->allowed =
      hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topology->hw));
  hwloc_bitmap_t limit = hwloc_bitmap_alloc();
  if (!topology->allowed || !limit) {
    hwloc_bitmap_free(limit);
    return fail(error, error_size, "out of memory", NULL);
  }
  int status = 0;
  if (source && source->allowed_cpuset) {
    if (hwloc_bitmap_list_sscanf(limit, source->allowed_cpuset) != 0)
      status = fail(error, error_size, "cannot parse the cpuset list",
                    source->allowed_cpuset);
    else
      hwloc_bitmap_and(topology->allowed, topology->allowed, limit);
  } else if (topology->can_bind_threads &&
             hwloc_get_cpubind(topology->hw, limit, HWLOC_CPUBIND_PROCESS) ==
                 0) {
    hwloc_bitmap_and(topology->allowed, topology->allowed, limit);
  }
  hwloc_bitmap_free(limit);
  if (status == 0 && hwloc_bitmap_iszero(topology->allowed))
    status = fail(error, error_size, "no CPU is allowed", NULL);
  return status;
}

static int collect_cores(fc_topology *topology, char *error,
                         size_t error_size) {
  hwloc_obj_type_t type = HWLOC_OBJ_CORE;
  int total = hwloc_get_nbobjs_by_type(topology->hw, type);
  if (total <= 0) { /* some platforms expose no core level */
    type = HWLOC_OBJ_PU;
    total = hwloc_get_nbobjs_by_type(topology->hw, type);
  }
  topology->cores = calloc((size_t)(total > 0 ? total : 1), sizeof(fc_core));
  if (!topology->cores) return fail(error, error_size, "out of memory", NULL);
  for (int i = 0; i < total; i++) {
    hwloc_obj_t object = hwloc_get_obj_by_type(topology->hw, type, i);
    if (!hwloc_bitmap_intersects(object->cpuset, topology->allowed)) continue;
    fc_core *core = &topology->cores[topology->core_count++];
    core->object = object;
    core->allowed = hwloc_bitmap_alloc();
    if (!core->allowed) return fail(error, error_size, "out of memory", NULL);
    hwloc_bitmap_and(core->allowed, object->cpuset, topology->allowed);
    core->allowed_pus = hwloc_bitmap_weight(core->allowed);
  }
  if (topology->core_count == 0)
    return fail(error, error_size, "no allowed core found", NULL);
  return 0;
}

int fc_topology_load(const fc_topology_source *source, fc_topology *topology,
                     char *error, size_t error_size) {
  memset(topology, 0, sizeof *topology);
  if (hwloc_topology_init(&topology->hw) != 0)
    return fail(error, error_size, "hwloc_topology_init failed", NULL);
  if (source && source->synthetic &&
      hwloc_topology_set_synthetic(topology->hw, source->synthetic) != 0) {
    fail(error, error_size, "invalid hwloc synthetic topology",
         source->synthetic);
    fc_topology_free(topology);
    return -1;
  }
  if (source && source->xml_path &&
      hwloc_topology_set_xml(topology->hw, source->xml_path) != 0) {
    fail(error, error_size, "cannot read hwloc XML topology", source->xml_path);
    fc_topology_free(topology);
    return -1;
  }
  if (hwloc_topology_load(topology->hw) != 0) {
    fail(error, error_size, "hwloc_topology_load failed", NULL);
    fc_topology_free(topology);
    return -1;
  }
  /* Synthetic and XML topologies are not this system: hwloc reports no
   * binding support for them, which is what keeps us from pinning. */
  const struct hwloc_topology_support *support =
      hwloc_topology_get_support(topology->hw);
  topology->can_bind_threads = hwloc_topology_is_thissystem(topology->hw) &&
                               support->cpubind &&
                               support->cpubind->set_thisthread_cpubind;
  topology->can_bind_memory =
      hwloc_topology_is_thissystem(topology->hw) && support->membind &&
      support->membind->alloc_membind && support->membind->bind_membind;
  if (compute_allowed(source, topology, error, error_size) != 0 ||
      collect_cores(topology, error, error_size) != 0) {
    fc_topology_free(topology);
    return -1;
  }
  return 0;
}

void fc_topology_free(fc_topology *topology) {
  if (!topology) return;
  for (int i = 0; i < topology->core_count; i++)
    hwloc_bitmap_free(topology->cores[i].allowed);
  free(topology->cores);
  hwloc_bitmap_free(topology->allowed);
  if (topology->hw) hwloc_topology_destroy(topology->hw);
  memset(topology, 0, sizeof *topology);
}
