/* The even/odd order of AVX-512 split-KV decode's bf16 rows (widened 32
 * elements at a time: the evens, then the odds) and back, by permutes:
 * q put in it, the states and output rows taken out of it, with the bits
 * of splitkv_common.c's scalar loops. Included only by AVX-512 sources. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_PAIRS_AVX512_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_PAIRS_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/decode/splitkv_common.h"
#include "kernels/merge/merge_states.h"
#include "simd/simd_avx512.h"
#include "simd/store_avx512.h"

enum { FC512_SPLITKV_PAIR = 32 };

/* Lanes of a 16-element store with `remaining` elements left (none past
 * the row). */
static inline __mmask16 fc512_splitkv_lanes_of(int64_t remaining) {
  return remaining <= 0 ? 0 : fc512_tail_mask(remaining);
}

/* 32 elements of a row in even/odd order (lo: the evens, hi: the odds)
 * back in natural order, and the other way (the widened bf16 loads'
 * order): two permutes each way. */
static inline __attribute__((always_inline)) void
fc512_from_pairs(__m512 lo, __m512 hi, __m512 *first, __m512 *second) {
  *first = _mm512_permutex2var_ps(
      lo,
      _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0),
      hi);
  *second =
      _mm512_permutex2var_ps(lo,
                             _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12,
                                              27, 11, 26, 10, 25, 9, 24, 8),
                             hi);
}

static inline __attribute__((always_inline)) void
fc512_to_pairs(__m512 first, __m512 second, __m512 *lo, __m512 *hi) {
  *lo = _mm512_permutex2var_ps(first,
                               _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16,
                                                14, 12, 10, 8, 6, 4, 2, 0),
                               second);
  *hi = _mm512_permutex2var_ps(first,
                               _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17,
                                                15, 13, 11, 9, 7, 5, 3, 1),
                               second);
}

/* An output row by vector stores (fc512_store: fc_store_row's bits). o in
 * even/odd order per FC512_SPLITKV_PAIR (bf16 V: o rows padded to 64, so
 * whole loads stay in them) goes back in order 32 elements at a time. */
static inline void fc512_splitkv_store_row(const float *o, int64_t pair,
                                           float factor, int64_t dv,
                                           flashcpu_dtype dtype, void *out) {
  const __m512 f = _mm512_set1_ps(factor);
  if (pair == 0) {
    for (int64_t d = 0; d < dv; d += 16) {
      const __mmask16 m = fc512_tail_mask(dv - d);
      fc512_store(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + d), f), dtype, out,
                  d, m);
    }
    return;
  }
  for (int64_t d = 0; d < dv; d += FC512_SPLITKV_PAIR) {
    __m512 first, second;
    fc512_from_pairs(_mm512_loadu_ps(o + d), _mm512_loadu_ps(o + d + 16),
                     &first, &second);
    fc512_store(_mm512_mul_ps(first, f), dtype, out, d,
                fc512_splitkv_lanes_of(dv - d));
    fc512_store(_mm512_mul_ps(second, f), dtype, out, d + 16,
                fc512_splitkv_lanes_of(dv - d - 16));
  }
}

/* fc_splitkv_write_state's record for a non-empty state (pair 0 or
 * FC512_SPLITKV_PAIR). */
static inline void fc512_splitkv_write_state(float *record, float m, float l,
                                             const float *o, int64_t dv,
                                             int64_t pair) {
  if (pair == 0 || m == -INFINITY) {
    fc_splitkv_write_state(record, m, l, o, dv, pair);
    return;
  }
  record[FC_STATE_M] = m;
  record[FC_STATE_L] = l;
  float *out = record + FC_STATE_O;
  for (int64_t d = 0; d < dv; d += FC512_SPLITKV_PAIR) {
    __m512 first, second;
    fc512_from_pairs(_mm512_loadu_ps(o + d), _mm512_loadu_ps(o + d + 16),
                     &first, &second);
    _mm512_mask_storeu_ps(out + d, fc512_splitkv_lanes_of(dv - d), first);
    _mm512_mask_storeu_ps(out + d + 16, fc512_splitkv_lanes_of(dv - d - 16),
                          second);
  }
}

/* q rows (padded to FC512_SPLITKV_PAIR, zero past head_dim) into even/odd
 * order. */
static inline void fc512_splitkv_q_to_pairs(float *q, int64_t padded) {
  for (int64_t d = 0; d < padded; d += FC512_SPLITKV_PAIR) {
    __m512 lo, hi;
    fc512_to_pairs(_mm512_loadu_ps(q + d), _mm512_loadu_ps(q + d + 16), &lo,
                   &hi);
    _mm512_storeu_ps(q + d, lo);
    _mm512_storeu_ps(q + d + 16, hi);
  }
}

#endif
