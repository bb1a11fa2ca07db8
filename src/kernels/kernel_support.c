#include "kernels/kernel_support.h"

#include <math.h>
#include <string.h>

#include "api/errors.h"
#include "common/dtype_convert.h"

#define LN2_F 0.69314718055994530942f

flashcpu_status fc_kernel_reserve_scratch(flashcpu_context *ctx,
                                          fc_runtime *runtime,
                                          fc_scratch_bytes_fn bytes_for,
                                          const void *args) {
  size_t needed = 0;
  for (int t = 0; t < runtime->plan.team_count; t++) {
    size_t bytes = bytes_for(args, runtime->plan.teams[t].size);
    if (bytes > needed) needed = bytes;
  }
  if (fc_runtime_reserve_scratch(runtime, needed) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "flashcpu_attention: out of memory allocating %zu bytes of "
                   "team scratch",
                   needed);
  return FLASHCPU_OK;
}

void fc_write_output_row(const fc_problem *p, int64_t b, int64_t row,
                         int64_t head, float m, float l, const float *o) {
  char *out = (char *)fc_view_row(&p->out, b, row, head);
  float lse;
  if (m == -INFINITY) { /* saw no key: 0 and -inf, never 0/0 */
    memset(out, 0, (size_t)(p->v_head_dim * p->out.element_size));
    lse = -INFINITY;
  } else {
    fc_store_row(o, 1.0f / l, p->v_head_dim, p->out.dtype, out);
    lse = (m + log2f(l)) * LN2_F;
  }
  if (p->lse) p->lse[(b * p->q_heads + head) * p->q_len + row] = lse;
}
