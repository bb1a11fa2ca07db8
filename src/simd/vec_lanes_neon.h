/* fcv_sum_lanes on NEON (4 lanes): the reduction across vectors that
 * vec_neon.h lacks. For NEON translation units only. */
#ifndef FLASHCPU_SIMD_VEC_LANES_NEON_H
#define FLASHCPU_SIMD_VEC_LANES_NEON_H

#include "simd/vec_neon.h"

/* Lane i of the result is the sum of the 4 lanes of v[i]. */
static inline fcv fcv_sum_lanes(const fcv v[FCV_LANES]) {
  return vpaddq_f32(vpaddq_f32(v[0], v[1]), vpaddq_f32(v[2], v[3]));
}

#endif
