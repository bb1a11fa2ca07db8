#include "kernels/merge/merge_states.h"

#include <math.h>
#include <string.h>

void fc_merge_state(float *into, const float *from, int64_t dv) {
  const float m_from = from[FC_STATE_M];
  if (m_from == -INFINITY) return; /* empty: nothing to add */
  const float m_into = into[FC_STATE_M];
  if (m_into == -INFINITY) { /* never form -inf - (-inf) */
    memcpy(into, from, (size_t)fc_state_floats(dv) * sizeof(float));
    return;
  }
  float m = m_into > m_from ? m_into : m_from;
  if (isnan(m_into) || isnan(m_from)) m = NAN;
  const float scale_into = exp2f(m_into - m), scale_from = exp2f(m_from - m);
  float *o = into + FC_STATE_O;
  const float *o_from = from + FC_STATE_O;
  for (int64_t d = 0; d < dv; d++)
    o[d] = o[d] * scale_into + o_from[d] * scale_from;
  into[FC_STATE_L] =
      into[FC_STATE_L] * scale_into + from[FC_STATE_L] * scale_from;
  into[FC_STATE_M] = m;
}

void fc_merge_state_tree(float *first, int64_t stride, int64_t count,
                         int64_t dv) {
  for (int64_t step = 1; step < count; step *= 2)
    for (int64_t i = 0; i + step < count; i += 2 * step)
      fc_merge_state(first + i * stride, first + (i + step) * stride, dv);
}
