/* Split-KV decode values from an I8 or U8 V cache by AVX512-VNNI byte dot
 * products (VPDPBUSD), for the chunks whose scores are byte ones too
 * (decode_splitkv_i8dot__avx512vnni.c). Per slot and block, the weights
 * times their row's scale are rounded to 8 bits against the block's
 * largest (codes 0..255: a step of 1/255 of it); four keys' codes,
 * interleaved byte by byte, meet a broadcast quad of weights, so one
 * instruction does 4 keys x 16 columns. Per 4 keys and 64 columns: 8
 * interleaving steps and 16 dot products for 4 slots (the int16 values
 * take twice the dot products and widen first). U8 codes go in with the
 * sign bit flipped (code - 128), the 128 folded into the zero points: o =
 * alpha o + step (sum - sum_j code_j (zero_j - 128)). */
#include <float.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { CHUNK = FC_SPLITKV_CHUNK, BLOCK = FC_SPLITKV_KEY_BLOCK, PASS = 64 };

/* A chunk's weights for one block as bytes: quads[s][j / 4] holds keys j
 * .. j + 3 (low byte j); o gets step[s] * (sum - offset[s]). */
typedef struct byte_weights {
  int32_t quads[CHUNK][BLOCK / 4];
  float step[CHUNK], offset[CHUNK];
} byte_weights;

/* false: some slot's weights cannot be rounded (a weight times its scale
 * negative or not finite, or a largest so small that 255 / largest
 * overflows): the f32 path takes the block. Keys past n and keys a slot
 * does not see weigh 0. */
static ALWAYS_INLINE bool
round_weights(const fc_splitkv_rows *v, flashcpu_dtype dtype, int64_t n,
              const float *weights, const unsigned *seen, byte_weights *out) {
  const __m512 scale = _mm512_loadu_ps(v->scale);
  const __mmask16 keys = fc512_tail_mask(n);
  __m512 w[CHUNK];
  __mmask16 unfit = 0;
  for (int s = 0; s < CHUNK; s++) {
    w[s] = _mm512_maskz_mul_ps((__mmask16)(seen[s] & keys),
                               _mm512_loadu_ps(weights + s * BLOCK), scale);
    /* Not in [0, FLT_MAX]: negative, inf or NaN. */
    unfit |= _mm512_cmp_ps_mask(w[s], _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ) |
             _mm512_cmp_ps_mask(w[s], _mm512_setzero_ps(), _CMP_LT_OQ);
  }
  if (unfit) return false;
  /* The 4 slots' largest, 255 over it and its 255th in one vector each
   * (lane s), not per slot. */
  const __m512 top = fc512_max4_by_lane(w);
  float largest[16], inverse[16], step[16];
  _mm512_storeu_ps(largest, top);
  _mm512_storeu_ps(inverse, _mm512_div_ps(_mm512_set1_ps(255.0f), top));
  _mm512_storeu_ps(step, _mm512_div_ps(top, _mm512_set1_ps(255.0f)));
  /* Zero points less the 128 of the flipped sign bit (U8); I8 has none. */
  const __m512 zero =
      _mm512_sub_ps(_mm512_loadu_ps(v->zero), _mm512_set1_ps(128.0f));
  for (int s = 0; s < CHUNK; s++) {
    __m512i codes = _mm512_setzero_si512();
    out->step[s] = 0.0f;
    if (largest[s] > 0.0f) {
      if (!(inverse[s] <= FLT_MAX)) return false;
      codes =
          _mm512_cvtps_epi32(_mm512_mul_ps(w[s], _mm512_set1_ps(inverse[s])));
      out->step[s] = step[s];
    }
    _mm_storeu_si128((__m128i *)out->quads[s], _mm512_cvtepi32_epi8(codes));
    out->offset[s] = dtype == FLASHCPU_DTYPE_U8
                         ? _mm512_reduce_add_ps(
                               _mm512_mul_ps(_mm512_cvtepi32_ps(codes), zero))
                         : 0.0f;
  }
  return true;
}

static ALWAYS_INLINE void
values_bytes(const fc_splitkv_rows *v, flashcpu_dtype dtype, int64_t dv,
             int64_t padded_dv, int64_t n, float *o, const float *alpha,
             const byte_weights *w, fc_prefetch_sweep *shared) {
  const bool prefetch = shared != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared);
  const __m512i sign = _mm512_set1_epi8((char)0x80);
  for (int64_t d = 0; d < dv; d += PASS) {
    const int64_t left = dv - d;
    const __mmask64 mask =
        left >= PASS ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
    /* acc[s][x]: in 128-bit lane L, columns 16 L + 4 x .. + 3. */
    __m512i acc[CHUNK][4];
    for (int s = 0; s < CHUNK; s++)
      for (int x = 0; x < 4; x++) acc[s][x] = _mm512_setzero_si512();
    for (int64_t j = 0; j < n; j += 4) {
      __m512i rows[4];
      for (int r = 0; r < 4; r++) {
        if (prefetch && j + r < n) fc_sweep_next(&sweep);
        /* Keys past n repeat the last row and weigh 0. */
        rows[r] = _mm512_maskz_loadu_epi8(mask, v->row[j + r] + d);
        if (dtype == FLASHCPU_DTYPE_U8) /* columns past dv stay 0 */
          rows[r] =
              _mm512_maskz_mov_epi8(mask, _mm512_xor_si512(rows[r], sign));
      }
      const __m512i ab_lo = _mm512_unpacklo_epi8(rows[0], rows[1]);
      const __m512i ab_hi = _mm512_unpackhi_epi8(rows[0], rows[1]);
      const __m512i cd_lo = _mm512_unpacklo_epi8(rows[2], rows[3]);
      const __m512i cd_hi = _mm512_unpackhi_epi8(rows[2], rows[3]);
      const __m512i quads[4] = {_mm512_unpacklo_epi16(ab_lo, cd_lo),
                                _mm512_unpackhi_epi16(ab_lo, cd_lo),
                                _mm512_unpacklo_epi16(ab_hi, cd_hi),
                                _mm512_unpackhi_epi16(ab_hi, cd_hi)};
      for (int s = 0; s < CHUNK; s++) {
        const __m512i weight = _mm512_set1_epi32(w->quads[s][j / 4]);
        for (int x = 0; x < 4; x++)
          acc[s][x] = _mm512_dpbusd_epi32(acc[s][x], weight, quads[x]);
      }
    }
    for (int s = 0; s < CHUNK; s++) {
      const __m512 factor = _mm512_set1_ps(alpha[s]);
      const __m512 step = _mm512_set1_ps(w->step[s]);
      const __m512 offset = _mm512_set1_ps(w->offset[s]);
      __m512 sums[4], columns[4];
      for (int x = 0; x < 4; x++) sums[x] = _mm512_cvtepi32_ps(acc[s][x]);
      fc512_transpose_128x4(sums, columns); /* columns[L]: 16 L .. + 15 */
      for (int x = 0; x < 4; x++) {
        float *out = o + s * padded_dv + d + 16 * x;
        _mm512_storeu_ps(
            out, _mm512_fmadd_ps(step, _mm512_sub_ps(columns[x], offset),
                                 _mm512_mul_ps(_mm512_loadu_ps(out), factor)));
      }
    }
  }
  if (prefetch) *shared = sweep;
}

bool fc_splitkv_values_i8dot__avx512vnni(
    const fc_splitkv_rows *v, flashcpu_dtype dtype, int64_t dv,
    int64_t padded_dv, int64_t n, float *o, const float *weights,
    const float *alpha, const unsigned *seen, fc_prefetch_sweep *sweep) {
  byte_weights w;
  if (!round_weights(v, dtype, n, weights, seen, &w)) return false;
#define VALUES_FOR(dt, dim_value)                                              \
  values_bytes(v, dt, dim_value, padded_dv, n, o, alpha, &w, sweep)
  FC_SPLITKV_BY_INT_DTYPE(dtype, dv, VALUES_FOR);
#undef VALUES_FOR
  return true;
}
