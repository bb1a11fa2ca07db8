/* Split-KV decode scores, shared by the AVX-512 kernel and its AVX512-BF16
 * dot-product variant: the reduction of 4 keys x 4 slots of partial dot
 * products, and the signature of the bf16 scores function. Include only
 * from translation units compiled for AVX-512. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_SCORES_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_SCORES_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/decode/decode_splitkv.h"

/* Slots per chunk, keys reduced together (blocks: FC_SPLITKV_KEY_BLOCK). */
enum { FC_SPLITKV_CHUNK = 4, FC_SPLITKV_KEYS_PER_GROUP = 4 };

/* Lane i of the result is the sum of the 16 lanes of v[i]. */
static inline __attribute__((always_inline)) __m512
fc_splitkv_sum16(const __m512 v[16]) {
  __m512 pairs[8], quads[4], halves[2];
  for (int i = 0; i < 8; i++)
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; i++) {
    __m512d x = _mm512_castps_pd(pairs[2 * i]);
    __m512d y = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  for (int i = 0; i < 2; i++)
    halves[i] = _mm512_add_ps(
        _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1],
                             _MM_SHUFFLE(2, 0, 2, 0)),
        _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1],
                             _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(
      _mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
      _mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* groups[g] holds slot s's keys 4g..4g+3 in 128-bit lane s (the sum16 of
 * acc[slot * 4 + key]); scores[s] gets slot s's 16 keys in order. */
static inline __attribute__((always_inline)) void
fc_splitkv_transpose_groups(const __m512 groups[4], __m512 scores[4]) {
  const __m512 low01 = _mm512_shuffle_f32x4(groups[0], groups[1],
                                            _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 low23 = _mm512_shuffle_f32x4(groups[2], groups[3],
                                            _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 high01 = _mm512_shuffle_f32x4(groups[0], groups[1],
                                             _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 high23 = _mm512_shuffle_f32x4(groups[2], groups[3],
                                             _MM_SHUFFLE(3, 2, 3, 2));
  scores[0] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(2, 0, 2, 0));
  scores[1] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(3, 1, 3, 1));
  scores[2] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(2, 0, 2, 0));
  scores[3] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(3, 1, 3, 1));
}

#endif
