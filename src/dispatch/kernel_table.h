/* The kernel table: which implementation of each kernel a context uses,
 * filled once per context from the CPU's features and the ISA cap. It says
 * what the hardware can do; the team plan (src/runtime) says how to run it. */
#ifndef FLASHCPU_DISPATCH_KERNEL_TABLE_H
#define FLASHCPU_DISPATCH_KERNEL_TABLE_H

#include <stddef.h>

#include "dispatch/cpu_features.h"
#include "flashcpu/flashcpu.h"
#include "kernels/convert/convert.h"

typedef struct fc_kernel_table {
  flashcpu_isa isa; /* the ISA the table was filled for */
  fc_row_to_f32_fn row_to_f32[3]; /* indexed by flashcpu_dtype */
  const char *row_to_f32_names[3];
  /* The attention kernels. Only the portable tiled kernel exists so far
   * (SIMD prefill and decode kernels come with their own slots). */
  const char *attention_name;
} fc_kernel_table;

/* The best ISA the features allow, capped by `cap` (AUTO: no cap). */
flashcpu_isa fc_best_isa(const fc_cpu_features *features, flashcpu_isa cap);
/* Whether the features allow isa at all. */
int fc_isa_supported(const fc_cpu_features *features, flashcpu_isa isa);

/* Parses FLASHCPU_ISA's value: returns the ISA, AUTO for NULL/empty, or -1
 * for text that names no ISA. */
int fc_isa_parse(const char *text);

void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa);

#endif
