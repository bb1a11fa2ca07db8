/* A context's kernel table: the registry rows its ISA and CPU can run, in
 * the registry's order, with the row converters and the settings. It says
 * what the hardware can do; the team plan (src/runtime) says how to run
 * it. */
#ifndef FLASHCPU_DISPATCH_KERNEL_TABLE_H
#define FLASHCPU_DISPATCH_KERNEL_TABLE_H

#include <stddef.h>

#include "dispatch/cpu_features.h"
#include "dispatch/settings.h"
#include "flashcpu/flashcpu.h"
#include "kernels/registry.h"

enum { FC_MAX_CANDIDATES = 16 };

typedef struct fc_kernel_table {
  flashcpu_isa isa;               /* the ISA the table was filled for */
  fc_row_to_f32_fn row_to_f32[3]; /* indexed by flashcpu_dtype */
  const char *row_to_f32_names[3];
  fc_dequant_row_fn dequant_row; /* quantized K/V rows */
  const char *dequant_row_name;
  fc_merge_fn merge; /* flashcpu_merge_states */
  const char *merge_name;
  /* The attention rows this ISA and CPU run, in the registry's order (the
   * choice passes over the forced-only ones). */
  const fc_attention_kernel *candidates[FC_MAX_CANDIDATES];
  size_t candidate_count;
  const fc_attention_kernel *forced; /* NULL: choose per call */
  fc_kernel_settings settings;
} fc_kernel_table;

/* Whether this CPU meets a row's need beyond its ISA. */
int fc_kernel_need_met(const fc_cpu_features *cpu, fc_cpu_need need);

/* Fills the table for isa (which the CPU supports) with the settings;
 * settings->forced_kernel, when set, must name a row of that ISA whose
 * need the CPU meets (the context checks this first). */
void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa,
                          const fc_cpu_features *cpu,
                          const fc_settings *settings);

/* The kernel for p and why (a line for FLASHCPU_VERBOSE): the forced one,
 * or the first candidate that takes and wants p. NULL (with the reason)
 * when the forced kernel cannot take p. reason_size 0: the same choice,
 * with no reason formatted. */
const fc_attention_kernel *fc_kernel_table_choose(const fc_kernel_table *table,
                                                  const fc_problem *p,
                                                  char *reason,
                                                  size_t reason_size);

#endif
