#include "dispatch/plan_execute.h"

#include <stdio.h>

static size_t line_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

size_t fc_plans_workspace_bytes(fc_kernel_plan *const *plans, int count) {
  size_t total = 0;
  for (int i = 0; i < count; i++) total += line_up(plans[i]->workspace_bytes);
  return total;
}

int fc_plans_reserve(fc_runtime *runtime, fc_kernel_plan *const *plans,
                     int count, bool with_workspace, char *why, size_t size) {
  size_t scratch = 0;
  int64_t tiles = 0;
  for (int i = 0; i < count; i++) {
    if (plans[i]->scratch_bytes > scratch) scratch = plans[i]->scratch_bytes;
    tiles += plans[i]->tile_count;
  }
  const size_t workspace = fc_plans_workspace_bytes(plans, count);
  if (fc_runtime_reserve_scratch(runtime, scratch) != 0) {
    snprintf(why, size, "out of memory allocating %zu bytes of team scratch",
             scratch);
    return -1;
  }
  if (with_workspace &&
      fc_runtime_reserve_call_workspace(runtime, workspace) != 0) {
    snprintf(why, size, "out of memory allocating %zu bytes of workspace",
             workspace);
    return -1;
  }
  if (fc_runtime_reserve_tile_order(runtime, tiles) != 0) {
    snprintf(why, size, "out of memory ordering %lld tiles", (long long)tiles);
    return -1;
  }
  return 0;
}

int fc_plans_launch(fc_runtime *runtime, fc_kernel_plan *const *plans,
                    const fc_problem *const *problems, int count,
                    void *workspace) {
  char *base = workspace ? workspace : runtime->call_workspace;
  size_t offset = 0; /* an offset, not a pointer: base is NULL when no plan
                        needs workspace */
  for (int i = 0; i < count; i++) {
    plans[i]->bind(plans[i], problems[i], base ? base + offset : NULL);
    offset += line_up(plans[i]->workspace_bytes);
  }
  int failed = 0;
  if (count == 2)
    failed = fc_runtime_launch_pair(runtime, &plans[0]->main, &plans[1]->main);
  else if (count == 1)
    failed = fc_runtime_launch(runtime, &plans[0]->main);
  for (int i = 0; i < count && !failed; i++)
    if (plans[i]->after.tile_count > 0)
      failed = fc_runtime_launch(runtime, &plans[i]->after);
  return failed ? -1 : 0;
}
