/* flashcpu_merge_states: check the states, then merge each output row's
 * states with the same tree the split-KV decode uses (kernels/merge). Rows
 * are independent; tiles of rows run on the teams, one thread per row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/view_check.h"
#include "common/dtype_convert.h"
#include "kernels/merge/merge_states.h"

#define CALL "flashcpu_merge_states"
#define LOG2E_F 1.44269504088896340736f
#define LN2_F 0.69314718055994530942f

enum { ROWS_PER_TILE = 16 };

typedef struct merge_args {
  const fc_kernel_table *table;
  int64_t count, batch, q_len, heads, dv;
  const fc_view *states; /* count views */
  const float *const *state_lse;
  fc_view out;
  float *lse;
} merge_args;

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

/* One state record per input: m = lse in the log2 domain, l = 1, o = out.
 * m is taken relative to the largest lse, so that it stays small and keeps
 * the precision a large lse (scores near 300) has in f32. */
static void merge_row(const merge_args *a, int64_t row, float *records) {
  const int64_t h = row % a->heads, i = (row / a->heads) % a->q_len,
                b = row / (a->heads * a->q_len);
  const int64_t lse_index = (b * a->heads + h) * a->q_len + i;
  const int64_t stride = fc_state_floats(a->dv);
  float reference = -INFINITY;
  for (int64_t s = 0; s < a->count; s++)
    if (a->state_lse[s][lse_index] > reference)
      reference = a->state_lse[s][lse_index];
  if (reference == -INFINITY) reference = 0.0f; /* every state empty or NaN */
  for (int64_t s = 0; s < a->count; s++) {
    float *record = records + s * stride;
    const float state_lse = a->state_lse[s][lse_index];
    record[FC_STATE_M] = state_lse == -INFINITY
                             ? -INFINITY
                             : (state_lse - reference) * LOG2E_F;
    record[FC_STATE_L] = 1.0f;
    if (state_lse != -INFINITY) /* an empty state's out is never read */
      a->table->row_to_f32[a->states[s].dtype](
          fc_view_row(&a->states[s], b, i, h), a->dv, 1.0f,
          record + FC_STATE_O);
  }
  fc_merge_state_tree(records, stride, a->count, a->dv);
  char *out = (char *)fc_view_row(&a->out, b, i, h);
  float lse;
  if (records[FC_STATE_M] == -INFINITY) {
    memset(out, 0, (size_t)(a->dv * a->out.element_size));
    lse = -INFINITY;
  } else {
    const float l = records[FC_STATE_L];
    fc_store_row(records + FC_STATE_O, 1.0f / l, a->dv, a->out.dtype, out);
    lse = reference + (records[FC_STATE_M] + log2f(l)) * LN2_F;
  }
  if (a->lse) a->lse[lse_index] = lse;
}

static void merge_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const merge_args *a = opaque;
  const int64_t rows = a->batch * a->q_len * a->heads;
  float *records = (float *)team->scratch +
                   (size_t)team->rank * (size_t)(a->count *
                                                 fc_state_floats(a->dv));
  int64_t end = (tile + 1) * ROWS_PER_TILE < rows ? (tile + 1) * ROWS_PER_TILE
                                                  : rows;
  for (int64_t row = tile * ROWS_PER_TILE + team->rank; row < end;
       row += team->size)
    merge_row(a, row, records);
}

flashcpu_status flashcpu_merge_states(flashcpu_context *ctx, int64_t count,
                                      const flashcpu_tensor *states,
                                      const float *const *state_lse,
                                      const flashcpu_tensor *out, float *lse) {
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  flashcpu_status status =
      check_merge(ctx, count, states, state_lse, out, lse);
  if (status != FLASHCPU_OK) return status;

  merge_args a = {&ctx->table, count, out->dims[0], out->dims[1],
                  out->dims[2], out->dims[3], NULL, state_lse,
                  {0}, lse};
  fc_fill_view(out, &a.out);
  fc_runtime *runtime = &ctx->runtime;
  int largest_team = 1;
  for (int t = 0; t < runtime->plan.team_count; t++)
    if (runtime->plan.teams[t].size > largest_team)
      largest_team = runtime->plan.teams[t].size;
  size_t views_bytes, scratch_bytes;
  if (__builtin_mul_overflow((size_t)count, sizeof(fc_view), &views_bytes) ||
      __builtin_mul_overflow((size_t)count,
                             (size_t)fc_state_floats(a.dv) * sizeof(float),
                             &scratch_bytes) ||
      __builtin_mul_overflow(scratch_bytes, (size_t)largest_team,
                             &scratch_bytes))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   CALL ": %lld states need more workspace than fits size_t",
                   (long long)count);
  fc_view *views = malloc(views_bytes);
  if (!views || fc_runtime_reserve_scratch(runtime, scratch_bytes) != 0) {
    free(views);
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory for the workspace of %lld states",
                   (long long)count);
  }
  for (int64_t s = 0; s < count; s++) fc_fill_view(&states[s], &views[s]);
  a.states = views;
  const int64_t rows = a.batch * a.q_len * a.heads;
  fc_launch launch = {merge_tile, &a, (rows + ROWS_PER_TILE - 1) / ROWS_PER_TILE,
                      true, NULL};
  int launched = fc_runtime_launch(runtime, &launch);
  free(views);
  if (launched != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory launching the merge");
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
