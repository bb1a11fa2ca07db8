/* Topology facts from hwloc: model, cores, PUs, caches, memory. */
#include "common/cpu_info.h"

#include <hwloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static toolkit_cache_level cache_level(hwloc_topology_t topology,
                                       hwloc_obj_type_t type) {
  toolkit_cache_level level = {0, 0};
  int count = hwloc_get_nbobjs_by_type(topology, type);
  if (count <= 0) return level; /* absent, or at several depths (-1) */
  hwloc_obj_t first = hwloc_get_obj_by_type(topology, type, 0);
  level.count = count;
  level.bytes = first->attr ? first->attr->cache.size : 0;
  return level;
}

/* Sum over every instance of the deepest cache level present. */
static uint64_t last_level_total(hwloc_topology_t topology) {
  static const hwloc_obj_type_t levels[] = {
      HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L3CACHE,
      HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L1CACHE};
  for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
    int count = hwloc_get_nbobjs_by_type(topology, levels[l]);
    if (count <= 0) continue;
    uint64_t total = 0;
    for (int i = 0; i < count; i++) {
      hwloc_obj_t cache = hwloc_get_obj_by_type(topology, levels[l], i);
      total += cache->attr ? cache->attr->cache.size : 0;
    }
    return total;
  }
  return 0;
}

/* The "model name" line of /proc/cpuinfo (x86 Linux), for hosts where
 * hwloc's CPUModel info is missing. */
static bool model_from_proc_cpuinfo(char *model, size_t size) {
  FILE *file = fopen("/proc/cpuinfo", "r");
  if (!file) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, file)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *colon = strchr(line, ':');
    if (!colon) continue;
    colon++;
    while (*colon == ' ' || *colon == '\t') colon++;
    snprintf(model, size, "%s", colon);
    model[strcspn(model, "\n")] = '\0';
    found = model[0] != '\0';
  }
  fclose(file);
  return found;
}

static int query_uncached(toolkit_cpu_info *info) {
  memset(info, 0, sizeof *info);
  snprintf(info->model, sizeof info->model, "unknown");
  info->packages = info->numa_nodes = info->cores = info->pus = 1;
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) return -1;
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    model_from_proc_cpuinfo(info->model, sizeof info->model);
    return -1;
  }
  hwloc_obj_t package = hwloc_get_obj_by_type(topology, HWLOC_OBJ_PACKAGE, 0);
  const char *model =
      package ? hwloc_obj_get_info_by_name(package, "CPUModel") : NULL;
  if (model && *model)
    snprintf(info->model, sizeof info->model, "%s", model);
  else
    model_from_proc_cpuinfo(info->model, sizeof info->model);
  int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
  if (count > 0) info->packages = count;
  count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  if (count > 0) info->numa_nodes = count;
  count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
  if (count > 0) info->cores = count;
  count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
  if (count > 0) info->pus = count;
  info->l1d = cache_level(topology, HWLOC_OBJ_L1CACHE);
  info->l2 = cache_level(topology, HWLOC_OBJ_L2CACHE);
  info->l3 = cache_level(topology, HWLOC_OBJ_L3CACHE);
  info->llc_total_bytes = last_level_total(topology);
  /* hwloc counts NUMA nodes' memory, which virtual machines with memory
   * added at run time under-report (4 GiB of 128): the OS's total wins. */
  info->memory_bytes = hwloc_get_root_obj(topology)->total_memory;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 &&
      (uint64_t)pages * (uint64_t)page > info->memory_bytes)
    info->memory_bytes = (uint64_t)pages * (uint64_t)page;
  hwloc_topology_destroy(topology);
  return 0;
}

/* The topology does not change while a tool runs: load it once. Not
 * thread-safe; the tools call it from their main thread. */
int toolkit_cpu_info_query(toolkit_cpu_info *info) {
  static toolkit_cpu_info cached;
  static int cached_status;
  static bool loaded = false;
  if (!loaded) {
    cached_status = query_uncached(&cached);
    loaded = true;
  }
  *info = cached;
  return cached_status;
}

void toolkit_format_bytes(uint64_t bytes, char *buffer, size_t size) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    unit++;
  }
  if (value == (double)(uint64_t)value)
    snprintf(buffer, size, "%.0f %s", value, units[unit]);
  else
    snprintf(buffer, size, "%.1f %s", value, units[unit]);
}
