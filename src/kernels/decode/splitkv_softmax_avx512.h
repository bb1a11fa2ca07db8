/* The online softmax of a split-KV chunk's block on AVX-512: the 4 slots'
 * scores (one vector of 16 keys each) become weights, the running max
 * and sums move, and each slot's rescaling factor comes out. Static
 * inline, for the AVX-512 split-KV translation units. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_SOFTMAX_AVX512_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_SOFTMAX_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/decode/decode_splitkv.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

/* Lane s of every 128-bit lane of v, in all 16 lanes. */
#define FC512_SLOT_LANE(v, s) _mm512_permute_ps((v), _MM_SHUFFLE(s, s, s, s))

/* Online softmax of a chunk's block: scores become weights (0 for hidden
 * keys and lanes past n) in weights[slot * 16 + key]; alpha[slot] is the
 * factor the slot's output must be rescaled by (exactly 1 where the running
 * max did not move). seen[slot]: the keys the slot sees, as a lane mask.
 * The 4 slots go through the max, the shift and the sums as vectors.
 * max_ps drops NaN, so a slot with a NaN score (or a NaN running max) has
 * its max set to NaN explicitly: its state then stays NaN, never "saw no
 * key". */
static inline __attribute__((always_inline)) void
fc512_splitkv_softmax(const __m512 scores[FC_SPLITKV_CHUNK], int64_t n,
                      float *m, float *l, float *weights,
                      float alpha[FC_SPLITKV_CHUNK],
                      __mmask16 seen[FC_SPLITKV_CHUNK]) {
  const __mmask16 lanes = fc512_tail_mask(n);
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
  __m512 masked[FC_SPLITKV_CHUNK];
  __mmask16 any_seen = 0, any_nan = 0;
  for (int c = 0; c < FC_SPLITKV_CHUNK; c++) {
    masked[c] = _mm512_mask_mov_ps(minus_inf, lanes, scores[c]);
    seen[c] = _mm512_cmp_ps_mask(masked[c], minus_inf, _CMP_NEQ_UQ) & lanes;
    any_seen |= (__mmask16)((seen[c] != 0) << c);
    any_nan |= (__mmask16)((_mm512_cmp_ps_mask(masked[c], masked[c],
                                               _CMP_UNORD_Q) != 0)
                           << c);
  }
  /* Lanes 0..3 of each 128-bit lane: the slots' running max, old and new.
   * A slot that saw nothing keeps its state: shift 0, alpha exactly 1. */
  const __m512 m_old = _mm512_broadcast_f32x4(_mm_loadu_ps(m));
  any_nan |= _mm512_cmp_ps_mask(m_old, m_old, _CMP_UNORD_Q) & 0xf;
  const __m512 m_new =
      _mm512_mask_mov_ps(_mm512_max_ps(m_old, fc512_max4_by_lane(masked)),
                         (__mmask16)(any_nan * 0x1111u), _mm512_set1_ps(NAN));
  const __mmask16 moved = (__mmask16)(any_seen * 0x1111u);
  const __m512 factor = fc512_exp2(_mm512_maskz_sub_ps(moved, m_old, m_new));
  _mm_storeu_ps(alpha, _mm512_castps512_ps128(factor));
  _mm_storeu_ps(m, _mm512_castps512_ps128(m_new));
#define SLOT_WEIGHTS(c)                                                        \
  do {                                                                         \
    const __m512 w = _mm512_maskz_mov_ps(                                      \
        seen[c],                                                               \
        fc512_exp2(_mm512_sub_ps(masked[c], FC512_SLOT_LANE(m_new, c))));      \
    const __m512 sums = _mm512_loadu_ps(l + c * FC_SPLITKV_KEY_BLOCK);         \
    _mm512_storeu_ps(l + c * FC_SPLITKV_KEY_BLOCK,                             \
                     _mm512_fmadd_ps(sums, FC512_SLOT_LANE(factor, c), w));    \
    _mm512_storeu_ps(weights + c * FC_SPLITKV_KEY_BLOCK, w);                   \
  } while (0)
  SLOT_WEIGHTS(0);
  SLOT_WEIGHTS(1);
  SLOT_WEIGHTS(2);
  SLOT_WEIGHTS(3);
#undef SLOT_WEIGHTS
}

#endif
