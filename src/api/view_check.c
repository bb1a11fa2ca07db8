#include "api/view_check.h"

#include <string.h>

#include "api/errors.h"
#include "common/quant.h"

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

bool fc_quantized_span_of(const void *data, flashcpu_dtype dtype,
                          const int64_t *dims, const int64_t *strides,
                          int count, fc_byte_span *span) {
  if (dtype != FLASHCPU_DTYPE_Q8_0)
    return fc_span_of(data, dims, strides, count,
                      (int64_t)flashcpu_dtype_size(dtype), span);
  /* Elements to blocks: the last element's block ends the span. */
  if (!fc_span_of(data, dims, strides, count, 1, span)) return false;
  const uint64_t elements = span->end - span->begin;
  const uint64_t blocks = (elements + FC_Q8_0_BLOCK - 1) / FC_Q8_0_BLOCK;
  if (blocks > UINT64_MAX / FC_Q8_0_BYTES ||
      span->begin + blocks * FC_Q8_0_BYTES < span->begin)
    return false;
  span->end = span->begin + (uintptr_t)(blocks * FC_Q8_0_BYTES);
  return true;
}

static flashcpu_status check_tensor(flashcpu_context *ctx, const char *call,
                                    const flashcpu_tensor *t, const char *name,
                                    int64_t min_seq, bool quantized_ok,
                                    fc_byte_span *span) {
  if (!t)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: %s is NULL", call,
                   name);
  if (!t->data)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: %s->data is NULL",
                   call, name);
  if (!fc_dtype_is_float(t->dtype) &&
      !(quantized_ok && fc_dtype_is_quantized(t->dtype)))
    return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                   quantized_ok
                       ? "%s: %s->dtype is %d; expected a flashcpu_dtype: "
                         "F32 (0), F16 (1), BF16 (2), I8 (3), U8 (4), "
                         "F8_E4M3 (5), F8_E5M2 (6) or Q8_0 (7)"
                       : "%s: %s->dtype is %d; expected FLASHCPU_DTYPE_F32 "
                         "(0), F16 (1) or BF16 (2) (quantized dtypes are "
                         "for K and V only)",
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
  if (t->dtype == FLASHCPU_DTYPE_Q8_0) {
    if (t->dims[3] % FC_Q8_0_BLOCK != 0)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     "%s: %s is Q8_0 with head_dim %lld; Q8_0 rows are "
                     "whole blocks of 32",
                     call, name, (long long)t->dims[3]);
    for (int d = 0; d < 3; d++)
      if (t->strides[d] % FC_Q8_0_BLOCK != 0)
        return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                       "%s: %s->strides[%d] (%s) is %lld; Q8_0 strides are "
                       "multiples of 32 elements (whole blocks)",
                       call, name, d, dim_names[d], (long long)t->strides[d]);
  }
  if (!fc_quantized_span_of(t->data, t->dtype, t->dims, t->strides, 4, span))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   "%s: %s's dims and strides reach past the int64 / address "
                   "range",
                   call, name);
  return FLASHCPU_OK;
}

flashcpu_status fc_check_tensor(flashcpu_context *ctx, const char *call,
                                const flashcpu_tensor *t, const char *name,
                                int64_t min_seq, fc_byte_span *span) {
  return check_tensor(ctx, call, t, name, min_seq, false, span);
}

flashcpu_status fc_check_kv_tensor(flashcpu_context *ctx, const char *call,
                                   const flashcpu_tensor *t, const char *name,
                                   int64_t min_seq, fc_byte_span *span) {
  return check_tensor(ctx, call, t, name, min_seq, true, span);
}

flashcpu_status fc_check_kv_scales(flashcpu_context *ctx, const char *call,
                                   const flashcpu_kv_scales *scales,
                                   flashcpu_dtype kv_dtype, const char *name,
                                   const int64_t dims[4], fc_byte_span *span,
                                   fc_byte_span *zero_span) {
  span->begin = span->end = zero_span->begin = zero_span->end = 0;
  if (!scales) return FLASHCPU_OK;
  if (!fc_dtype_is_quantized(kv_dtype) || kv_dtype == FLASHCPU_DTYPE_Q8_0)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: %s is given for a %s tensor; scales belong to I8, U8, "
                   "F8_E4M3 and F8_E5M2 (Q8_0 keeps its own in its blocks)",
                   call, name, flashcpu_dtype_name(kv_dtype));
  if (!scales->data)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: %s->data is NULL",
                   call, name);
  if (!fc_dtype_is_float(scales->dtype))
    return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                   "%s: %s->dtype is %d; scales are f32, f16 or bf16", call,
                   name, (int)scales->dtype);
  for (int d = 0; d < 4; d++)
    if (scales->strides[d] < 0)
      return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                     "%s: %s->strides[%d] is %lld; strides must be "
                     "non-negative (0 broadcasts)",
                     call, name, d, (long long)scales->strides[d]);
  if (scales->zero_points && kv_dtype != FLASHCPU_DTYPE_U8)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: %s->zero_points is given for a %s tensor; zero points "
                   "belong to U8",
                   call, name, flashcpu_dtype_name(kv_dtype));
  const int64_t size = (int64_t)flashcpu_dtype_size(scales->dtype);
  if (!fc_span_of(scales->data, dims, scales->strides, 4, size, span) ||
      (scales->zero_points && !fc_span_of(scales->zero_points, dims,
                                          scales->strides, 4, size, zero_span)))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   "%s: %s's strides reach past the int64 / address range",
                   call, name);
  return FLASHCPU_OK;
}

void fc_fill_view_scales(const flashcpu_kv_scales *scales, fc_view *view) {
  if (!scales) return;
  view->scales = (const char *)scales->data;
  view->zeros = (const char *)scales->zero_points;
  view->scale_dtype = scales->dtype;
  view->scale_size = (int64_t)flashcpu_dtype_size(scales->dtype);
  memcpy(view->scale_strides, scales->strides, sizeof view->scale_strides);
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
  fc_view_set_storage(view);
}

void fc_view_set_storage(fc_view *view) {
  view->quantized = fc_dtype_is_quantized(view->dtype);
  if (view->dtype != FLASHCPU_DTYPE_Q8_0) return;
  /* Q8_0: byte strides (whole blocks), one byte as the element. */
  view->element_size = 1;
  for (int d = 0; d < 3; d++)
    view->strides[d] = view->strides[d] / FC_Q8_0_BLOCK * FC_Q8_0_BYTES;
}
