/* fcv_sum_lanes on NEON (4 lanes): the reduction across vectors that
 * vec_neon.h lacks, and the lane masks and maximum of one vector that the
 * split-KV softmax scans with. For NEON translation units only. */
#ifndef FLASHCPU_SIMD_VEC_LANES_NEON_H
#define FLASHCPU_SIMD_VEC_LANES_NEON_H

#include <math.h>
#include <stdint.h>

#include "simd/vec_neon.h"

/* Lane i of the result is the sum of the 4 lanes of v[i]. */
static inline fcv fcv_sum_lanes(const fcv v[FCV_LANES]) {
  return vpaddq_f32(vpaddq_f32(v[0], v[1]), vpaddq_f32(v[2], v[3]));
}

/* Lane i of a compare's mask -> bit i. */
static inline unsigned fcv_lane_bits(uint32x4_t mask) {
  const uint32_t weights[4] = {1, 2, 4, 8};
  return vaddvq_u32(vandq_u32(mask, vld1q_u32(weights)));
}

/* Lane i -> bit i: the lanes that are not -inf (NaN included), and the
 * NaN lanes. */
static inline unsigned fcv_bits_not_neg_inf(fcv v) {
  return fcv_lane_bits(vmvnq_u32(vceqq_f32(v, vdupq_n_f32(-INFINITY))));
}
static inline unsigned fcv_bits_nan(fcv v) {
  return fcv_lane_bits(vmvnq_u32(vceqq_f32(v, v)));
}

/* The largest of v's lanes (with a NaN lane, any lane or NaN). */
static inline float fcv_hmax(fcv v) { return vmaxvq_f32(v); }

#endif
