#include "api/view_check.h"

#include <string.h>

#include "api/errors.h"

static const char *const dim_names[4] = {"batch", "seq", "heads", "head_dim"};

bool fc_spans_overlap(fc_byte_span a, fc_byte_span b) {
  return a.begin < a.end && b.begin < b.end && a.begin < b.end &&
         b.begin < a.end;
}

bool fc_span_of(const void *data, const int64_t *dims, const int64_t *strides,
                int count, int64_t element_size, fc_byte_span *span) {
  int64_t last = 0;
  for (int d = 0; d < count; d++) {
    int64_t reach;
    if (dims[d] == 0) { /* empty: touches nothing */
      span->begin = span->end = (uintptr_t)data;
      return true;
    }
    if (__builtin_mul_overflow(dims[d] - 1, strides[d], &reach) ||
        __builtin_add_overflow(last, reach, &last))
      return false;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, 1, &last) ||
      __builtin_mul_overflow(last, element_size, &bytes))
    return false;
  uintptr_t begin = (uintptr_t)data;
  if (begin + (uintptr_t)bytes < begin) return false;
  span->begin = begin;
  span->end = begin + (uintptr_t)bytes;
  return true;
}

flashcpu_status fc_check_tensor(flashcpu_context *ctx, const char *call,
                                const flashcpu_tensor *t, const char *name,
                                int64_t min_seq, fc_byte_span *span) {
  if (!t)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: %s is NULL", call,
                   name);
  if (!t->data)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: %s->data is NULL",
                   call, name);
  size_t element_size = flashcpu_dtype_size(t->dtype);
  if (element_size == 0)
    return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                   "%s: %s->dtype is %d; expected FLASHCPU_DTYPE_F32 (0), "
                   "F16 (1) or BF16 (2)",
                   call, name, (int)t->dtype);
  for (int d = 0; d < 4; d++) {
    int64_t minimum = d == FLASHCPU_DIM_SEQ ? min_seq : 1;
    if (t->dims[d] < minimum)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     "%s: %s->dims[%d] (%s) is %lld; it must be >= %lld", call,
                     name, d, dim_names[d], (long long)t->dims[d],
                     (long long)minimum);
  }
  if (t->strides[3] != 1)
    return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                   "%s: %s->strides[3] is %lld; head_dim must be contiguous "
                   "(stride 1)",
                   call, name, (long long)t->strides[3]);
  for (int d = 0; d < 3; d++)
    if (t->strides[d] < 0)
      return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                     "%s: %s->strides[%d] (%s) is %lld; strides must be "
                     "non-negative",
                     call, name, d, dim_names[d], (long long)t->strides[d]);
  if (!fc_span_of(t->data, t->dims, t->strides, 4, (int64_t)element_size,
                  span))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   "%s: %s's dims and strides reach past the int64 / address "
                   "range",
                   call, name);
  return FLASHCPU_OK;
}

/* Sorted by stride, each dim must step over everything inside it. */
bool fc_output_rows_distinct(const flashcpu_tensor *out) {
  int order[3] = {0, 1, 2};
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (out->strides[order[j]] < out->strides[order[i]]) {
        int swap = order[i];
        order[i] = order[j];
        order[j] = swap;
      }
  int64_t inner_extent = out->dims[3]; /* elements one head row spans */
  for (int i = 0; i < 3; i++) {
    int d = order[i];
    if (out->dims[d] == 1) continue;
    if (out->strides[d] < inner_extent) return false;
    inner_extent = out->strides[d] * (out->dims[d] - 1) + inner_extent;
  }
  return true;
}

void fc_fill_view(const flashcpu_tensor *t, fc_view *view) {
  memset(view, 0, sizeof *view);
  view->data = (const char *)t->data;
  view->dtype = t->dtype;
  view->element_size = (int64_t)flashcpu_dtype_size(t->dtype);
  memcpy(view->strides, t->strides, sizeof view->strides);
}
