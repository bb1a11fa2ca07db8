/* The contract between a registry row and the dispatcher: a row plans a
 * problem (what memory it needs, how many tiles it launches) without
 * writing anything; the dispatcher reserves that memory, binds the call's
 * data and runs the launches. Planning reads the shape, the lengths and
 * the dtypes only, so a plan made once serves every layer of a step; the
 * call's data and options (scale, masks, softcap) come with the bind. */
#ifndef FLASHCPU_KERNELS_KERNEL_PLAN_H
#define FLASHCPU_KERNELS_KERNEL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/portable_atomic.h"
#include "common/problem.h"
#include "kernels/kernel_env.h"
#include "runtime/launch.h"

/* Room for a kernel's own arguments, which its launches point into. */
enum { FC_KERNEL_STATE_BYTES = 1024 };

typedef struct fc_kernel_plan fc_kernel_plan;

/* Points the plan's state at p's data and options and at the call's
 * workspace (workspace_bytes, 64-byte aligned), and sets the launches. */
typedef void (*fc_kernel_bind_fn)(fc_kernel_plan *plan, const fc_problem *p,
                                  void *workspace);

struct fc_kernel_plan {
  size_t scratch_bytes;   /* per team: the largest team's need */
  size_t workspace_bytes; /* one call's, kept from the main launch to the
                             after-launch */
  int64_t tile_count;     /* tiles of the main launch */
  fc_kernel_bind_fn bind;
  fc_launch main;  /* set by bind */
  fc_launch after; /* set by bind; tile_count 0: none (split-KV's merge) */
  FC_ALIGNAS(64) unsigned char state[FC_KERNEL_STATE_BYTES];
};

/* A registry row: plans p for env's runtime and settings. Errors (with the
 * reason in env) only where the problem is out of the kernel's reach. */
typedef flashcpu_status (*fc_attention_plan_fn)(const fc_kernel_env *env,
                                                const fc_problem *p,
                                                fc_kernel_plan *plan);

#endif
