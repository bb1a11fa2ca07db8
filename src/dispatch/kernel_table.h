/* The kernel table: which implementation of each kernel a context uses,
 * filled once per context from the CPU's features and the ISA cap. It says
 * what the hardware can do; the team plan (src/runtime) says how to run it. */
#ifndef FLASHCPU_DISPATCH_KERNEL_TABLE_H
#define FLASHCPU_DISPATCH_KERNEL_TABLE_H

#include <stddef.h>

#include "dispatch/cpu_features.h"
#include "flashcpu/flashcpu.h"
#include "kernels/convert/convert.h"

struct fc_runtime;
struct fc_problem;
struct fc_kernel_table;

/* An attention kernel: runs the whole checked problem on the runtime. */
typedef flashcpu_status (*fc_attention_fn)(flashcpu_context *ctx,
                                           struct fc_runtime *runtime,
                                           const struct fc_kernel_table *table,
                                           const struct fc_problem *p);

typedef struct fc_kernel_table {
  flashcpu_isa isa; /* the ISA the table was filled for */
  fc_row_to_f32_fn row_to_f32[3]; /* indexed by flashcpu_dtype */
  const char *row_to_f32_names[3];
  /* Any number of query rows: the portable tiled kernel on every ISA so
   * far (SIMD prefill kernels take this slot). */
  fc_attention_fn tiled;
  const char *tiled_name;
  /* One query row, one pass over K/V per GQA group; NULL where the ISA has
   * none (then tiled runs decode too). */
  fc_attention_fn decode;
  const char *decode_name;
} fc_kernel_table;

/* The kernel for a problem, and its name. */
fc_attention_fn fc_kernel_table_choose(const fc_kernel_table *table,
                                       const struct fc_problem *p,
                                       int team_size_min, const char **name);

/* The best ISA the features allow, capped by `cap` (AUTO: no cap). */
flashcpu_isa fc_best_isa(const fc_cpu_features *features, flashcpu_isa cap);
/* Whether the features allow isa at all. */
int fc_isa_supported(const fc_cpu_features *features, flashcpu_isa isa);

/* Parses FLASHCPU_ISA's value: returns the ISA, AUTO for NULL/empty, or -1
 * for text that names no ISA. */
int fc_isa_parse(const char *text);

void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa);

#endif
