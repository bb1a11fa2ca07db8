/* Checks every public call makes of the tensor views and buffers it gets:
 * dims, strides, dtype, and which bytes they may touch (for overlap tests).
 * Messages start with the name of the call that failed. */
#ifndef FLASHCPU_API_VIEW_CHECK_H
#define FLASHCPU_API_VIEW_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"

/* A byte span [begin, end) that a view or buffer may touch. */
typedef struct fc_byte_span {
  uintptr_t begin, end;
} fc_byte_span;

bool fc_spans_overlap(fc_byte_span a, fc_byte_span b);

/* Highest element offset reached through dims/strides plus one, times the
 * element size, as a byte span from data. False on int64 overflow. */
bool fc_span_of(const void *data, const int64_t *dims, const int64_t *strides,
                int count, int64_t element_size, fc_byte_span *span);

/* A tensor argument: non-NULL, known dtype, dims >= 1 (seq >= min_seq),
 * head_dim contiguous, strides non-negative, extent within int64. */
flashcpu_status fc_check_tensor(flashcpu_context *ctx, const char *call,
                                const flashcpu_tensor *t, const char *name,
                                int64_t min_seq, fc_byte_span *span);

/* Distinct (batch, seq, heads) indices of an output map to distinct rows. */
bool fc_output_rows_distinct(const flashcpu_tensor *out);

/* The internal view of a checked tensor. */
void fc_fill_view(const flashcpu_tensor *t, fc_view *view);

#endif
