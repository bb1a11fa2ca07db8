/* Running kernel plans: reserve what they need on the runtime, bind the
 * call's data, launch. Two plans (a paged step's split-KV and prefill
 * parts) share one main launch, so that memory-bound decode tiles run
 * beside compute-bound prefill tiles; their after-launches follow. */
#ifndef FLASHCPU_DISPATCH_PLAN_EXECUTE_H
#define FLASHCPU_DISPATCH_PLAN_EXECUTE_H

#include <stddef.h>

#include "flashcpu/flashcpu.h"
#include "kernels/kernel_plan.h"
#include "runtime/runtime.h"

enum { FC_EXECUTE_MAX_PLANS = 2 };

/* Bytes of call workspace the plans need together (each on its own
 * 64-byte lines). */
size_t fc_plans_workspace_bytes(fc_kernel_plan *const *plans, int count);

/* Makes the runtime's team scratch and tile order large enough for the
 * plans, and its call workspace too unless with_workspace is false (the
 * caller brings one). -1 when out of memory, with what failed in why. */
int fc_plans_reserve(fc_runtime *runtime, fc_kernel_plan *const *plans,
                     int count, bool with_workspace, char *why, size_t size);

/* Binds plan i to problems[i] and its part of workspace (NULL: the
 * runtime's), then runs the main launches and the after-launches. The
 * runtime must have been reserved for these plans; 0, or -1 when a launch
 * could not order its tiles. */
int fc_plans_launch(fc_runtime *runtime, fc_kernel_plan *const *plans,
                    const fc_problem *const *problems, int count,
                    void *workspace);

#endif
