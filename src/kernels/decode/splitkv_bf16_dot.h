/* The dot-product step the AVX512-BF16 split-KV scores share (bf16 K, and
 * fp8 K rebuilt as bf16): 32 elements of the chunk's 4 q rows against 4
 * keys' bf16 vectors, into acc[slot * 4 + key]. Included only by sources
 * built for AVX512-BF16. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_BF16_DOT_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_BF16_DOT_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/decode/decode_splitkv.h"

static inline __attribute__((always_inline)) void
fc_splitkv_bf16_dot_step(__m512 *acc, const uint16_t *q, int64_t q_stride,
                         int64_t d,
                         const __m512bh k[FC_SPLITKV_KEYS_PER_GROUP]) {
  for (int s = 0; s < FC_SPLITKV_CHUNK; s++) {
    const __m512bh qs = (__m512bh)_mm512_loadu_si512(q + s * q_stride + d);
    for (int j = 0; j < FC_SPLITKV_KEYS_PER_GROUP; j++)
      acc[s * FC_SPLITKV_KEYS_PER_GROUP + j] =
          _mm512_dpbf16_ps(acc[s * FC_SPLITKV_KEYS_PER_GROUP + j], qs, k[j]);
  }
}

#endif
