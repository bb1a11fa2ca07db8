/* flashcpu_merge_states: check the states, then run the merge kernel
 * (kernels/merge), which uses the same tree as split-KV decode. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/view_check.h"
#include "kernels/merge/merge_states.h"

#define CALL "flashcpu_merge_states"

static const char *const dim_names[4] = {"batch", "seq", "heads", "head_dim"};

static flashcpu_status check_merge(flashcpu_context *ctx, int64_t count,
                                   const flashcpu_tensor *states,
                                   const float *const *state_lse,
                                   const flashcpu_tensor *out, float *lse) {
  flashcpu_status status;
  if (count < 1)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": count is %lld; it must be >= 1", (long long)count);
  if (!states)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, CALL ": states is NULL");
  if (!state_lse)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": state_lse is NULL");
  fc_byte_span out_span, lse_span = {0, 0};
  if ((status = fc_check_tensor(ctx, CALL, out, "out", 1, &out_span)))
    return status;
  if (!fc_output_rows_distinct(out))
    return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                   CALL ": out's strides make different rows share memory");
  int64_t rows, lse_bytes;
  if (__builtin_mul_overflow(out->dims[0], out->dims[1], &rows) ||
      __builtin_mul_overflow(rows, out->dims[2], &rows) ||
      __builtin_mul_overflow(rows, (int64_t)sizeof(float), &lse_bytes))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   CALL ": the lse arrays' size overflows int64");
  if (lse) {
    lse_span.begin = (uintptr_t)lse;
    lse_span.end = (uintptr_t)lse + (uintptr_t)lse_bytes;
    if (lse_span.end < lse_span.begin)
      return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                     CALL ": lse reaches past the address range");
    if (fc_spans_overlap(lse_span, out_span))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     CALL ": lse overlaps out in memory");
  }
  for (int64_t i = 0; i < count; i++) {
    char name[48];
    snprintf(name, sizeof name, "states[%lld]", (long long)i);
    fc_byte_span span;
    if ((status = fc_check_tensor(ctx, CALL, &states[i], name, 1, &span)))
      return status;
    for (int d = 0; d < 4; d++)
      if (states[i].dims[d] != out->dims[d])
        return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                       CALL ": %s->dims[%d] (%s) is %lld but out's is %lld",
                       name, d, dim_names[d], (long long)states[i].dims[d],
                       (long long)out->dims[d]);
    if (!state_lse[i])
      return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                     CALL ": state_lse[%lld] is NULL", (long long)i);
    fc_byte_span lse_in = {(uintptr_t)state_lse[i],
                           (uintptr_t)state_lse[i] + (uintptr_t)lse_bytes};
    if (lse_in.end < lse_in.begin)
      return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                     CALL ": state_lse[%lld] reaches past the address range",
                     (long long)i);
    if (fc_spans_overlap(out_span, span) || fc_spans_overlap(lse_span, span))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     CALL ": %s overlaps %s in memory",
                     fc_spans_overlap(out_span, span) ? "out" : "lse", name);
    if (fc_spans_overlap(out_span, lse_in) ||
        fc_spans_overlap(lse_span, lse_in))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     CALL ": %s overlaps state_lse[%lld] in memory",
                     fc_spans_overlap(out_span, lse_in) ? "out" : "lse",
                     (long long)i);
  }
  return FLASHCPU_OK;
}

flashcpu_status flashcpu_merge_states(flashcpu_context *ctx, int64_t count,
                                      const flashcpu_tensor *states,
                                      const float *const *state_lse,
                                      const flashcpu_tensor *out, float *lse) {
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  flashcpu_status status = check_merge(ctx, count, states, state_lse, out, lse);
  if (status != FLASHCPU_OK) return status;

  fc_view out_view;
  fc_fill_view(out, &out_view);
  size_t views_bytes;
  if (__builtin_mul_overflow((size_t)count, sizeof(fc_view), &views_bytes))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   CALL ": %lld states need more workspace than fits size_t",
                   (long long)count);
  fc_view *views = malloc(views_bytes);
  if (!views)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory for the views of %lld states",
                   (long long)count);
  for (int64_t s = 0; s < count; s++) fc_fill_view(&states[s], &views[s]);
  char reason[256];
  fc_kernel_env env = fc_context_kernel_env(ctx, reason, sizeof reason);
  const fc_merge_problem problem = {count,        out->dims[0], out->dims[1],
                                    out->dims[2], out->dims[3], views,
                                    state_lse,    out_view,     lse};
  status = ctx->table.merge(&env, &problem);
  free(views);
  if (status != FLASHCPU_OK) return fc_fail(ctx, status, CALL ": %s", reason);
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
