/* fcv_sum_lanes on AVX2 (8 lanes): the reduction across vectors that
 * vec_avx2.h lacks, in f32 or int32, and the lane masks and maximum of one
 * vector that the split-KV softmax scans with. For AVX2 translation units
 * only. */
#ifndef FLASHCPU_SIMD_VEC_LANES_AVX2_H
#define FLASHCPU_SIMD_VEC_LANES_AVX2_H

#include <math.h>

#include "simd/vec_avx2.h"

/* Lane i of the result is the sum of the 8 lanes of v[i], summed as int32
 * (exact) when integer, else as f32: one tree for both (as
 * fc512_sum16_by_lane_as). */
static inline __attribute__((always_inline)) __m256i
fc256_sum8_by_lane_as(const __m256i v[8], int integer) {
#define FC256_HADD(a, b)                                                       \
  (integer ? _mm256_hadd_epi32((a), (b))                                       \
           : _mm256_castps_si256(_mm256_hadd_ps(_mm256_castsi256_ps(a),        \
                                                _mm256_castsi256_ps(b))))
  const __m256i t0 = FC256_HADD(v[0], v[1]), t1 = FC256_HADD(v[2], v[3]);
  const __m256i t2 = FC256_HADD(v[4], v[5]), t3 = FC256_HADD(v[6], v[7]);
  /* Per 128-bit half: the half's sums of v[0..3] (u0) and v[4..7] (u1). */
  const __m256i u0 = FC256_HADD(t0, t1), u1 = FC256_HADD(t2, t3);
  const __m256i low = _mm256_permute2x128_si256(u0, u1, 0x20);
  const __m256i high = _mm256_permute2x128_si256(u0, u1, 0x31);
#undef FC256_HADD
  return integer ? _mm256_add_epi32(low, high)
                 : _mm256_castps_si256(_mm256_add_ps(
                       _mm256_castsi256_ps(low), _mm256_castsi256_ps(high)));
}

/* Lane i of the result is the sum of the 8 lanes of v[i]. */
static inline fcv fcv_sum_lanes(const fcv v[FCV_LANES]) {
  __m256i bits[8];
  for (int i = 0; i < 8; i++) bits[i] = _mm256_castps_si256(v[i]);
  return _mm256_castsi256_ps(fc256_sum8_by_lane_as(bits, 0));
}

/* Lane i -> bit i: the lanes that are not -inf (NaN included), and the
 * NaN lanes. */
static inline unsigned fcv_bits_not_neg_inf(fcv v) {
  return (unsigned)_mm256_movemask_ps(
      _mm256_cmp_ps(v, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
}
static inline unsigned fcv_bits_nan(fcv v) {
  return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* The largest of v's lanes (with a NaN lane, any lane or NaN). */
static inline float fcv_hmax(fcv v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

#endif
