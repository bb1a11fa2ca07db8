/* The context behind the opaque flashcpu_context handle. */
#ifndef FLASHCPU_API_CONTEXT_INTERNAL_H
#define FLASHCPU_API_CONTEXT_INTERNAL_H

#include <stdbool.h>

#include "dispatch/kernel_table.h"
#include "dispatch/settings.h"
#include "flashcpu/flashcpu.h"
#include "runtime/runtime.h"

#define FC_ERROR_MESSAGE_SIZE 512

struct flashcpu_context {
  /* Never reused in a process, unlike the address: what a plan is tied to. */
  uint64_t id;
  fc_runtime runtime;    /* topology, teams, scratch: how to run */
  fc_kernel_table table; /* what to run */
  fc_settings settings;  /* what the table and runtime were made with */
  bool verbose;          /* FLASHCPU_VERBOSE=1: log plan and choices */
  char last_error[FC_ERROR_MESSAGE_SIZE];
  char last_kernels[2 * FC_KERNEL_NAME_MAX + 4]; /* of the last success */
};

/* Creates a context on a given topology source (NULL: this machine); the
 * public create calls it, tests use it with synthetic topologies. */
flashcpu_status fc_context_create_on(const flashcpu_context_options *options,
                                     const fc_topology_source *source,
                                     flashcpu_context **ctx);

/* The environment a kernel of this context runs with; reason receives the
 * kernel's reason for an error. */
fc_kernel_env fc_context_kernel_env(flashcpu_context *ctx, char *reason,
                                    size_t reason_size);

#endif
