/* What the AVX-512 integer scores (decode_splitkv_i16dot__avx512vnni.c and
 * decode_splitkv_i8dot__avx512vnni.c) do the same way after their dot
 * products: a block's exact int32 sums to the chunk's f32 scores. Include
 * in a TU built with AVX-512 flags. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_INT_SCORES_AVX512_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_INT_SCORES_AVX512_H

#include <immintrin.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/splitkv_common.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

/* groups[g]: the sums of keys 4 g .. 4 g + 3 at lane 4 * key + slot of each
 * 128-bit lane (fc512_sum16_by_lane_as of acc[slot * 4 + key]); the 128-bit
 * transpose puts slot s's 16 keys in one vector. out[16 s + j] = (sum -
 * offset_j * q sum_s) * row scale_j * q scale_s, saturated as every score
 * is; offset NULL: none. */
static inline __attribute__((always_inline)) void
fc512_int_scores_finish(const __m512i groups[FC_SPLITKV_KEY_BLOCK / 4],
                        const fc_splitkv_rows *k, const fc_splitkv_int_q *q,
                        const __m512 *offset, float *out) {
  __m512 sums[FC_SPLITKV_KEY_BLOCK / 4], scores[FC_SPLITKV_CHUNK];
  for (int g = 0; g < FC_SPLITKV_KEY_BLOCK / 4; g++)
    sums[g] = _mm512_cvtepi32_ps(groups[g]);
  fc512_transpose_128x4(sums, scores);
  const __m512 row_scale = _mm512_loadu_ps(k->scale);
  for (int s = 0; s < FC_SPLITKV_CHUNK; s++) {
    __m512 value = scores[s];
    if (offset)
      value = _mm512_fnmadd_ps(*offset, _mm512_set1_ps(q->sum[s]), value);
    value = _mm512_mul_ps(_mm512_mul_ps(value, row_scale),
                          _mm512_set1_ps(q->scale[s]));
    _mm512_storeu_ps(out + s * FC_SPLITKV_KEY_BLOCK, fc512_saturate(value));
  }
}

#endif
