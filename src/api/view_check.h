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

/* The same for K and V, which may also be quantized (Q8_0: head_dim and
 * every other stride multiples of 32). */
flashcpu_status fc_check_kv_tensor(flashcpu_context *ctx, const char *call,
                                   const flashcpu_tensor *t, const char *name,
                                   int64_t min_seq, fc_byte_span *span);

/* fc_span_of for a dtype (Q8_0: elements to whole blocks of bytes). */
bool fc_quantized_span_of(const void *data, flashcpu_dtype dtype,
                          const int64_t *dims, const int64_t *strides,
                          int count, fc_byte_span *span);

/* The scales view of a K or V of kv_dtype (NULL is fine): given only for
 * I8/U8/F8, zero points only for U8; the bytes it and its zero points
 * span over dims ([batch or pages, seq or page size, heads, head_dim]). */
flashcpu_status fc_check_kv_scales(flashcpu_context *ctx, const char *call,
                                   const flashcpu_kv_scales *scales,
                                   flashcpu_dtype kv_dtype, const char *name,
                                   const int64_t dims[4], fc_byte_span *span,
                                   fc_byte_span *zero_span);

/* Distinct (batch, seq, heads) indices of an output map to distinct rows. */
bool fc_output_rows_distinct(const flashcpu_tensor *out);

/* The internal view of a checked tensor. */
void fc_fill_view(const flashcpu_tensor *t, fc_view *view);
/* A view's storage from its dtype, element size and element strides:
 * quantized, and Q8_0's strides in bytes. */
void fc_view_set_storage(fc_view *view);
/* A checked scales view into a K/V view (NULL: none). */
void fc_fill_view_scales(const flashcpu_kv_scales *scales, fc_view *view);

#endif
