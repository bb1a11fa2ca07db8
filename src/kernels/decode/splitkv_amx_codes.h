/* Integer codes for the AMX-INT8 decode kernel
 * (decode_splitkv_amx__amxint8.c): f32 rounded to 15-bit codes, a code
 * split into two signed bytes, and byte rows interleaved by 4 keys as the
 * tiles' B operands take them. Include in a TU built with AVX-512 flags. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_CODES_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_CODES_H

#include <float.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

/* q codes: 15 bits, as the VPDPWSSD kernel's. */
enum { FC_AMX_Q_LIMIT = 16383 };

/* code = 256 hi + lo with lo in -128..127 (both signed bytes): 16-bit
 * lanes. */
static inline __attribute__((always_inline)) __m512i
fc_amx_low_byte16(__m512i code) {
  return _mm512_sub_epi16(
      _mm512_and_si512(_mm512_add_epi16(code, _mm512_set1_epi16(128)),
                       _mm512_set1_epi16(0xff)),
      _mm512_set1_epi16(128));
}

/* q (f32, dim) as codes |c| <= FC_AMX_Q_LIMIT, round to nearest, with its step
 * and the codes' sum; false where q is not finite or its step would be
 * subnormal (the f32 path). */
static inline bool fc_amx_round_q(const float *q, int64_t dim, int16_t *codes,
                                  float *step, float *sum) {
  __m512 top = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t d = 0; d < dim; d += 16) {
    const __m512 x = _mm512_abs_ps(_mm512_loadu_ps(q + d));
    bad |= _mm512_cmp_ps_mask(x, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
    top = _mm512_max_ps(top, x);
  }
  if (bad) return false;
  const float largest = _mm512_reduce_max_ps(top);
  const float s = largest > 0.0f ? largest / (float)FC_AMX_Q_LIMIT : 1.0f;
  if (!(s >= FLT_MIN)) return false;
  __m512i total = _mm512_setzero_si512();
  const __m512 limit = _mm512_set1_ps((float)FC_AMX_Q_LIMIT);
  for (int64_t d = 0; d < dim; d += 16) {
    __m512 c = _mm512_roundscale_ps(
        _mm512_div_ps(_mm512_loadu_ps(q + d), _mm512_set1_ps(s)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    c = _mm512_min_ps(
        limit, _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), limit), c));
    const __m512i ci = _mm512_cvttps_epi32(c);
    total = _mm512_add_epi32(total, ci);
    _mm256_storeu_si256((__m256i *)(codes + d), _mm512_cvtepi32_epi16(ci));
  }
  *step = s;
  *sum = (float)_mm512_reduce_add_epi32(total);
  return true;
}

/* The 4 rows from `rows` (64 bytes each at column offset col) interleaved
 * by key: out[k] holds, per 128-bit lane L, columns 16 L + 4 k .. + 3 as
 * 4 bytes each (keys 0..3). */
static inline __attribute__((always_inline)) void
fc_amx_interleave4(const char *const *rows, int64_t col, __m512i out[4]) {
  const __m512i v0 = _mm512_loadu_si512(rows[0] + col);
  const __m512i v1 = _mm512_loadu_si512(rows[1] + col);
  const __m512i v2 = _mm512_loadu_si512(rows[2] + col);
  const __m512i v3 = _mm512_loadu_si512(rows[3] + col);
  const __m512i a_lo = _mm512_unpacklo_epi8(v0, v1),
                a_hi = _mm512_unpackhi_epi8(v0, v1);
  const __m512i b_lo = _mm512_unpacklo_epi8(v2, v3),
                b_hi = _mm512_unpackhi_epi8(v2, v3);
  out[0] = _mm512_unpacklo_epi16(a_lo, b_lo);
  out[1] = _mm512_unpackhi_epi16(a_lo, b_lo);
  out[2] = _mm512_unpacklo_epi16(a_hi, b_hi);
  out[3] = _mm512_unpackhi_epi16(a_hi, b_hi);
}

#endif
