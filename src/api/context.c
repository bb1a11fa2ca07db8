/* Context lifetime and the thread count it resolves. */
#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"

void flashcpu_context_options_init(flashcpu_context_options *options) {
  if (!options) return;
  memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

/* Cores (not hyperthreads) that this process may run on: the intersection
 * of hwloc's allowed set (cgroup cpuset) with the process binding (taskset). */
static int count_allowed_cores(void) {
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) return 1;
  int cores = 0;
  if (hwloc_topology_load(topology) == 0) {
    hwloc_bitmap_t allowed = hwloc_bitmap_dup(
        hwloc_topology_get_allowed_cpuset(topology));
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (allowed && bound &&
        hwloc_get_cpubind(topology, bound, HWLOC_CPUBIND_PROCESS) == 0)
      hwloc_bitmap_and(allowed, allowed, bound);
    int n = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
    for (int i = 0; i < n && allowed; i++) {
      hwloc_obj_t core = hwloc_get_obj_by_type(topology, HWLOC_OBJ_CORE, i);
      if (hwloc_bitmap_intersects(core->cpuset, allowed)) cores++;
    }
    hwloc_bitmap_free(bound);
    hwloc_bitmap_free(allowed);
  }
  hwloc_topology_destroy(topology);
  return cores > 0 ? cores : 1;
}

/* OMP_NUM_THREADS's first value ("8" or "8,2"), or 0 when unset or invalid. */
static int omp_num_threads_from_env(void) {
  const char *text = getenv("OMP_NUM_THREADS");
  if (!text || !*text) return 0;
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno || end == text || value <= 0 || value > 65536) return 0;
  return (int)value;
}

flashcpu_status flashcpu_context_create(const flashcpu_context_options *options,
                                        flashcpu_context **ctx) {
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER,
                   "flashcpu_context_create: ctx (the output pointer) is NULL");
  *ctx = NULL;
  flashcpu_context_options defaults;
  flashcpu_context_options_init(&defaults);
  if (!options) options = &defaults;
  if (options->struct_size != sizeof(flashcpu_context_options))
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "flashcpu_context_create: options->struct_size is %zu, "
                   "expected %zu (call flashcpu_context_options_init first)",
                   options->struct_size, sizeof(flashcpu_context_options));
  if (options->num_threads < 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "flashcpu_context_create: num_threads is %d; it must be 0 "
                   "(all allowed cores) or positive",
                   options->num_threads);

  flashcpu_context *created = calloc(1, sizeof *created);
  if (!created)
    return fc_fail(NULL, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "flashcpu_context_create: out of memory");
  int threads = options->num_threads;
  if (threads == 0) threads = omp_num_threads_from_env();
  if (threads == 0) threads = count_allowed_cores();
  created->num_threads = threads;
  *ctx = created;
  fc_clear_error(NULL);
  return FLASHCPU_OK;
}

void flashcpu_context_destroy(flashcpu_context *ctx) { free(ctx); }

int flashcpu_context_num_threads(const flashcpu_context *ctx) {
  return ctx ? ctx->num_threads : 0;
}
