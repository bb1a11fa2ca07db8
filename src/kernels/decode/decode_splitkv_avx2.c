/* Split-KV decode for AVX2 + FMA: the fcv_* template with 8-lane vectors
 * (2 keys x 4 slots of dot products reduce together) and 2 vectors of
 * output columns x 4 slots in registers (8 accumulators of 16 registers);
 * rows are read where they lie, 16 elements at a time. */
#include <stdint.h>

#include "flashcpu/flashcpu.h"
#include "simd/vec_avx2.h"

/* Lane i of the result is the sum of the 8 lanes of v[i]. */
static inline fcv ds_sum_lanes(const fcv v[FCV_LANES]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  /* Per 128-bit half: the half's sums of v[0..3] (u0) and v[4..7] (u1). */
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                       _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Elements d .. d + 15 of a row as f32: f32 and f16 in order, bf16 even
 * elements in lo and odd ones in hi (a shift and an and, no shuffle). */
static inline __attribute__((always_inline)) void
ds_load_pair(const char *row, flashcpu_dtype dtype, int64_t d, fcv *lo,
             fcv *hi) {
  if (dtype == FLASHCPU_DTYPE_BF16) {
    const __m256i raw =
        _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    *hi = _mm256_castsi256_ps(
        _mm256_and_si256(raw, _mm256_set1_epi32((int)0xffff0000u)));
  } else if (dtype == FLASHCPU_DTYPE_F16) {
    const uint16_t *half = (const uint16_t *)row + d;
    *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)half));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(half + 8)));
  } else {
    *lo = _mm256_loadu_ps((const float *)row + d);
    *hi = _mm256_loadu_ps((const float *)row + d + 8);
  }
}

#define DS_VALUE_VECTORS 2
#define DS_NAME(what) fc_splitkv_##what##__avx2
#define DS_KERNEL fc_decode_splitkv__avx2

#include "kernels/decode/decode_splitkv_vec.inc"
