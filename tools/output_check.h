/* Checks sampled output rows of a workload against the float64 oracle. */
#ifndef FLASHCPU_TOOLS_OUTPUT_CHECK_H
#define FLASHCPU_TOOLS_OUTPUT_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/workload.h"

typedef struct output_check_result {
  int rows_checked;
  double max_error;     /* largest |out - oracle| over checked elements */
  double max_tolerance; /* tolerance of the row that holds max_error */
  double worst_ratio;   /* largest error / tolerance; > 1 fails */
  bool passed;          /* every element within tolerance, no NaN */
} output_check_result;

/* Checks `rows` random (request, query head, query row) triples of
 * workload->out, which must hold the result of the call on KV layer
 * `layer` (paged requests: their K/V copied out of the pages for the
 * oracle). Serve checks its prefill chunk on every other sample. The
 * sample is fixed by seed. */
output_check_result output_check_rows(const toolkit_workload *workload,
                                      int layer, int rows, uint64_t seed);

#endif
