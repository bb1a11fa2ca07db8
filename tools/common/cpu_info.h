/* What the machine is: CPU model, ISA features, cores and caches. Used to
 * print `flashcpu info`, to size the buffers that must not fit in the
 * last-level cache, and to label benchmark results. */
#ifndef FLASHCPU_TOOLS_CPU_INFO_H
#define FLASHCPU_TOOLS_CPU_INFO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct toolkit_cache_level {
  uint64_t bytes; /* size of one instance; 0 when hwloc reports none */
  int count;      /* instances in the machine */
} toolkit_cache_level;

typedef struct toolkit_cpu_info {
  char model[128];
  int packages, numa_nodes, cores, pus;
  toolkit_cache_level l1d, l2, l3;
  /* The last cache level hwloc reports, summed over its instances: what a
   * buffer must exceed (several times) to be measured from memory. */
  uint64_t llc_total_bytes;
  uint64_t memory_bytes; /* total RAM (the OS's, or hwloc's if larger; 0 if
                            unknown) */
} toolkit_cpu_info;

/* Fills *info from hwloc (and /proc/cpuinfo for the model when hwloc has
 * none). Returns 0, or -1 when hwloc cannot load the topology (then *info
 * holds safe defaults: one core, no caches). Cached after the first call. */
int toolkit_cpu_info_query(toolkit_cpu_info *info);

/* "48 KiB", "2 MiB", "1.5 GiB": human sizes for reports. */
void toolkit_format_bytes(uint64_t bytes, char *buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif
