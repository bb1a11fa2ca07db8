#include "kernels/kernel_support.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/dtype_convert.h"
#include "common/math_constants.h"
#include "common/score.h"

flashcpu_status fc_kernel_fail(const fc_kernel_env *env, flashcpu_status status,
                               const char *format, ...) {
  if (env->reason && env->reason_size) {
    va_list args;
    va_start(args, format);
    vsnprintf(env->reason, env->reason_size, format, args);
    va_end(args);
  }
  return status;
}

flashcpu_status fc_kernel_plan_start(const fc_kernel_env *env,
                                     fc_kernel_plan *plan, const void *args,
                                     size_t size) {
  if (size > sizeof plan->state)
    return fc_kernel_fail(env, FLASHCPU_ERROR_INTERNAL,
                          "kernel arguments of %zu bytes exceed the plan's %zu",
                          size, sizeof plan->state);
  memset(plan, 0, sizeof *plan);
  memcpy(plan->state, args, size);
  return FLASHCPU_OK;
}

size_t fc_kernel_scratch_bytes(const fc_runtime *runtime,
                               fc_scratch_bytes_fn bytes_for,
                               const void *args) {
  size_t needed = 0;
  for (int t = 0; t < runtime->plan.team_count; t++) {
    const size_t bytes = bytes_for(args, runtime->plan.teams[t].size);
    if (bytes > needed) needed = bytes;
  }
  return needed;
}

flashcpu_status fc_kernel_reserve_scratch(const fc_kernel_env *env,
                                          fc_scratch_bytes_fn bytes_for,
                                          const void *args) {
  const size_t needed = fc_kernel_scratch_bytes(env->runtime, bytes_for, args);
  if (fc_runtime_reserve_scratch(env->runtime, needed) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory allocating %zu bytes of team "
                          "scratch",
                          needed);
  return FLASHCPU_OK;
}

/* Sink logit of a query head as f32. */
static float sink_logit(const fc_problem *p, int64_t head) {
  switch (p->sinks_dtype) {
  case FLASHCPU_DTYPE_F16:
    return fc_f16_to_f32(((const uint16_t *)p->sinks)[head]);
  case FLASHCPU_DTYPE_BF16:
    return fc_bf16_to_f32(((const uint16_t *)p->sinks)[head]);
  default:
    return ((const float *)p->sinks)[head];
  }
}

bool fc_output_factor(const fc_problem *p, int64_t b, int64_t row, int64_t head,
                      float m, float l, float *factor) {
  float lse;
  bool scaled = true;
  if (p->sinks) {
    /* The sink is one more key, of value 0: it joins m and l only. */
    const float sink = fc_saturate(sink_logit(p, head) * FC_LOG2E_F);
    if (m == -INFINITY) { /* saw no key: 0, and the sink's weight */
      *factor = NAN;      /* NaN times any o is NaN */
      scaled = isnan(sink);
      lse = sink * FC_LN2_F;
    } else {
      float top = m > sink ? m : sink;
      if (isnan(m) || isnan(sink)) top = NAN;
      const float keys = exp2f(m - top);
      const float total = l * keys + exp2f(sink - top);
      *factor = keys / total;
      lse = (top + log2f(total)) * FC_LN2_F;
    }
  } else if (m == -INFINITY) { /* saw no key: 0 and -inf, never 0/0 */
    scaled = false;
    lse = -INFINITY;
  } else {
    *factor = 1.0f / l;
    lse = (m + log2f(l)) * FC_LN2_F;
  }
  if (p->lse)
    p->lse[b * p->lse_batch_stride + head * p->lse_head_stride +
           fc_problem_q_start(p, b) + row] = lse;
  return scaled;
}

void fc_write_output_row(const fc_problem *p, int64_t b, int64_t row,
                         int64_t head, float m, float l, const float *o) {
  char *out = (char *)fc_view_row(&p->out, b, row, head);
  float factor;
  if (fc_output_factor(p, b, row, head, m, l, &factor))
    fc_store_row(o, factor, p->v_head_dim, p->out.dtype, out);
  else
    memset(out, 0, (size_t)(p->v_head_dim * p->out.element_size));
}
