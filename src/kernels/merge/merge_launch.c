/* The merge kernel: each output row's states merged with the fixed tree
 * of merge_states.c. Rows are independent; tiles of rows run on the teams,
 * one thread per row. Portable C. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype_convert.h"
#include "common/math_constants.h"
#include "common/score.h"
#include "kernels/merge/merge_states.h"
#include "kernels/registry.h"

enum { ROWS_PER_TILE = 16 };

typedef struct merge_args {
  const fc_kernel_env *env;
  fc_merge_problem problem;
} merge_args;

/* One state record per input: m = lse in the log2 domain, l = 1, o = out.
 * m is taken relative to the largest lse, so that it stays small and keeps
 * the precision a large lse (scores near 300) has in f32; saturated, so a
 * finite lse far below the largest weighs 0 rather than reading as empty. */
static void merge_row(const merge_args *a, int64_t row, float *records) {
  const fc_merge_problem *m = &a->problem;
  const int64_t h = row % m->heads, i = (row / m->heads) % m->q_len,
                b = row / (m->heads * m->q_len);
  const int64_t lse_index = (b * m->heads + h) * m->q_len + i;
  const int64_t stride = fc_state_floats(m->dv);
  float reference = -INFINITY;
  for (int64_t s = 0; s < m->count; s++)
    if (m->state_lse[s][lse_index] > reference)
      reference = m->state_lse[s][lse_index];
  if (reference == -INFINITY) reference = 0.0f; /* every state empty or NaN */
  for (int64_t s = 0; s < m->count; s++) {
    float *record = records + s * stride;
    const float state_lse = m->state_lse[s][lse_index];
    record[FC_STATE_M] =
        state_lse == -INFINITY
            ? -INFINITY
            : fc_saturate((state_lse - reference) * FC_LOG2E_F);
    record[FC_STATE_L] = 1.0f;
    if (state_lse != -INFINITY) /* an empty state's out is never read */
      a->env->row_to_f32[m->states[s].dtype](
          fc_view_row(&m->states[s], b, i, h), m->dv, 1.0f,
          record + FC_STATE_O);
  }
  fc_merge_state_tree(records, stride, m->count, m->dv);
  char *out = (char *)fc_view_row(&m->out, b, i, h);
  float lse;
  if (records[FC_STATE_M] == -INFINITY) {
    memset(out, 0, (size_t)(m->dv * m->out.element_size));
    lse = -INFINITY;
  } else {
    const float l = records[FC_STATE_L];
    fc_store_row(records + FC_STATE_O, 1.0f / l, m->dv, m->out.dtype, out);
    lse = reference + (records[FC_STATE_M] + log2f(l)) * FC_LN2_F;
  }
  if (m->lse) m->lse[lse_index] = lse;
}

static void merge_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const merge_args *a = opaque;
  const fc_merge_problem *m = &a->problem;
  const int64_t rows = m->batch * m->q_len * m->heads;
  float *records =
      (float *)team->scratch +
      (size_t)team->rank * (size_t)(m->count * fc_state_floats(m->dv));
  int64_t end =
      (tile + 1) * ROWS_PER_TILE < rows ? (tile + 1) * ROWS_PER_TILE : rows;
  for (int64_t row = tile * ROWS_PER_TILE + team->rank; row < end;
       row += team->size)
    merge_row(a, row, records);
}

flashcpu_status fc_merge_states__scalar(const fc_kernel_env *env,
                                        const fc_merge_problem *m) {
  merge_args a = {env, *m};
  const int64_t count = m->count;
  fc_runtime *runtime = env->runtime;
  int largest_team = 1;
  for (int t = 0; t < runtime->plan.team_count; t++)
    if (runtime->plan.teams[t].size > largest_team)
      largest_team = runtime->plan.teams[t].size;
  size_t scratch_bytes;
  if (__builtin_mul_overflow((size_t)count,
                             (size_t)fc_state_floats(m->dv) * sizeof(float),
                             &scratch_bytes) ||
      __builtin_mul_overflow(scratch_bytes, (size_t)largest_team,
                             &scratch_bytes))
    return fc_kernel_fail(env, FLASHCPU_ERROR_SIZE_OVERFLOW,
                          "%lld states need more workspace than fits size_t",
                          (long long)count);
  if (fc_runtime_reserve_scratch(runtime, scratch_bytes) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory for the workspace of %lld states",
                          (long long)count);
  const int64_t rows = m->batch * m->q_len * m->heads;
  fc_launch launch = {merge_tile, &a,
                      (rows + ROWS_PER_TILE - 1) / ROWS_PER_TILE, true, NULL};
  if (fc_runtime_launch(runtime, &launch) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory launching the merge");
  return FLASHCPU_OK;
}
