/* fcv_sum_lanes on AVX2 (8 lanes): the reduction across vectors that
 * vec_avx2.h lacks. For AVX2 translation units only. */
#ifndef FLASHCPU_SIMD_VEC_LANES_AVX2_H
#define FLASHCPU_SIMD_VEC_LANES_AVX2_H

#include "simd/vec_avx2.h"

/* Lane i of the result is the sum of the 8 lanes of v[i]. */
static inline fcv fcv_sum_lanes(const fcv v[FCV_LANES]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  /* Per 128-bit half: the half's sums of v[0..3] (u0) and v[4..7] (u1). */
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                       _mm256_permute2f128_ps(u0, u1, 0x31));
}

#endif
