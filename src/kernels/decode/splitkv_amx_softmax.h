/* What the AMX decode kernels (decode_splitkv_amx*.c) do the same way
 * between their scores and values passes: a slot's softmax over the whole
 * split at once (its max is known before any weight: no rescaling), and
 * the slot's partial state written at the end. Include in a TU built with
 * AVX-512 flags. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_SOFTMAX_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_SOFTMAX_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/splitkv_common.h"
#include "simd/simd_avx512.h"

/* A slot's split: the max m and sum l of its scores p[0 .. 16 blocks), p
 * turned into weights (0 where the slot does not see the key) and seen[i]
 * the bits of block i's keys it sees. nan: some score is NaN (m and l
 * are not set further); active: the slot sees a key. */
static inline void fc_amx_slot_softmax(float *p, uint16_t *seen,
                                       int64_t blocks, float *m, float *l,
                                       bool *nan, bool *active) {
  *m = -INFINITY;
  *l = 0.0f;
  *nan = false;
  *active = false;
  __m512 top = _mm512_set1_ps(-INFINITY);
  __mmask16 unordered = 0;
  for (int64_t i = 0; i < blocks; i++) {
    const __m512 x = _mm512_loadu_ps(p + FC_SPLITKV_KEY_BLOCK * i);
    unordered |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    top = _mm512_max_ps(top, x);
  }
  if (unordered) {
    *nan = true;
    return;
  }
  const float largest = _mm512_reduce_max_ps(top);
  *m = largest;
  if (largest == -INFINITY)
    return;
  *active = true;
  const __m512 shift = _mm512_set1_ps(largest);
  __m512 total = _mm512_setzero_ps();
  for (int64_t i = 0; i < blocks; i++) {
    const __m512 x = _mm512_loadu_ps(p + FC_SPLITKV_KEY_BLOCK * i);
    const __mmask16 sees =
        _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    const __m512 w =
        _mm512_maskz_mov_ps(sees, fc512_exp2(_mm512_sub_ps(x, shift)));
    _mm512_storeu_ps(p + FC_SPLITKV_KEY_BLOCK * i, w);
    total = _mm512_add_ps(total, w);
    seen[i] = sees;
  }
  *l = _mm512_reduce_add_ps(total);
}

/* A slot's partial state into its record: empty where the tile had no
 * work for it or it sees no key, NaN throughout where it saw a NaN score
 * (o is overwritten), else m, l and o[0..dim). */
static inline void fc_amx_slot_write(float *record, bool work, bool nan,
                                     float m, float l, float *o,
                                     int64_t dim) {
  if (!work || (!nan && m == -INFINITY)) {
    fc_splitkv_write_state(record, -INFINITY, 0.0f, NULL, dim, 0);
  } else if (nan) {
    for (int64_t d = 0; d < dim; d++)
      o[d] = NAN;
    fc_splitkv_write_state(record, NAN, NAN, o, dim, 0);
  } else {
    fc_splitkv_write_state(record, m, l, o, dim, 0);
  }
}

#endif
