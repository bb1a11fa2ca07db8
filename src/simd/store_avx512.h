/* f32 lanes stored as an output dtype with the bits of fc_store_row
 * (common/dtype_convert.h): bf16 rounded to nearest even by integer
 * arithmetic, so that subnormals stay (VCVTNEPS2BF16 flushes them); f16 by
 * VCVTPS2PH, which rounds the same way; NaN as the scalar code writes it. */
#ifndef FLASHCPU_SIMD_STORE_AVX512_H
#define FLASHCPU_SIMD_STORE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"

/* The lanes of x under mask into row at element index i. */
static inline void fc512_store(__m512 x, flashcpu_dtype dtype, void *row,
                               int64_t i, __mmask16 mask) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    _mm512_mask_storeu_ps((float *)row + i, mask, x);
    return;
  }
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  __m256i half;
  if (dtype == FLASHCPU_DTYPE_F16) {
    const __m512i quiet =
        _mm512_or_si512(_mm512_and_si512(high, _mm512_set1_epi32(0x8000)),
                        _mm512_set1_epi32(0x7e00));
    half = _mm256_mask_mov_epi16(
        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), nan,
        _mm512_cvtepi32_epi16(quiet));
  } else {
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits,
                         _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)),
        16);
    half = _mm512_cvtepi32_epi16(
        _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40)));
  }
  _mm256_mask_storeu_epi16((uint16_t *)row + i, mask, half);
}

#endif
