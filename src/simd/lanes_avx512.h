/* AVX-512 reductions and transposes across vectors: trees of unpack and
 * 128-bit-lane shuffles that reduce many vectors at once, with no scalar
 * step. Static inline, for AVX-512 translation units only. */
#ifndef FLASHCPU_SIMD_LANES_AVX512_H
#define FLASHCPU_SIMD_LANES_AVX512_H

#include <immintrin.h>

/* Lane i of the result is the sum of the 16 lanes of v[i], summed as
 * int32 (exact) when integer, else as f32: one tree for both. */
static inline __attribute__((always_inline)) __m512i
fc512_sum16_by_lane_as(const __m512i v[16], int integer) {
#define FC512_ADD(a, b)                                                        \
  (integer ? _mm512_add_epi32((a), (b))                                        \
           : _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a),         \
                                               _mm512_castsi512_ps(b))))
  __m512i pairs[8], quads[4], halves[2];
  for (int i = 0; i < 8; i++)
    pairs[i] = FC512_ADD(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; i++)
    quads[i] = FC512_ADD(_mm512_unpacklo_epi64(pairs[2 * i], pairs[2 * i + 1]),
                         _mm512_unpackhi_epi64(pairs[2 * i], pairs[2 * i + 1]));
  for (int i = 0; i < 2; i++)
    halves[i] = FC512_ADD(_mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1],
                                               _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1],
                                               _MM_SHUFFLE(3, 1, 3, 1)));
  return FC512_ADD(
      _mm512_shuffle_i32x4(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
      _mm512_shuffle_i32x4(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
#undef FC512_ADD
}

static inline __attribute__((always_inline)) __m512
fc512_sum16_by_lane(const __m512 v[16]) {
  __m512i bits[16];
  for (int i = 0; i < 16; i++) bits[i] = _mm512_castps_si512(v[i]);
  return _mm512_castsi512_ps(fc512_sum16_by_lane_as(bits, 0));
}

/* The 4 x 4 transpose of 128-bit lanes: lane s of out[g] is lane g of
 * in[s]. */
static inline __attribute__((always_inline)) void
fc512_transpose_128x4(const __m512 in[4], __m512 out[4]) {
  const __m512 low01 =
      _mm512_shuffle_f32x4(in[0], in[1], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 low23 =
      _mm512_shuffle_f32x4(in[2], in[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 high01 =
      _mm512_shuffle_f32x4(in[0], in[1], _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 high23 =
      _mm512_shuffle_f32x4(in[2], in[3], _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(2, 0, 2, 0));
  out[1] = _mm512_shuffle_f32x4(low01, low23, _MM_SHUFFLE(3, 1, 3, 1));
  out[2] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(2, 0, 2, 0));
  out[3] = _mm512_shuffle_f32x4(high01, high23, _MM_SHUFFLE(3, 1, 3, 1));
}

/* The largest of v[i]'s 16 lanes in lane i of every 128-bit lane (i < 4).
 * MAXPS semantics: a NaN may be dropped. */
static inline __attribute__((always_inline)) __m512
fc512_max4_by_lane(const __m512 v[4]) {
  const __m512 t0 = _mm512_max_ps(_mm512_unpacklo_ps(v[0], v[1]),
                                  _mm512_unpackhi_ps(v[0], v[1]));
  const __m512 t1 = _mm512_max_ps(_mm512_unpacklo_ps(v[2], v[3]),
                                  _mm512_unpackhi_ps(v[2], v[3]));
  __m512 u = _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(
                               _mm512_castps_pd(t0), _mm512_castps_pd(t1))),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(
                               _mm512_castps_pd(t0), _mm512_castps_pd(t1))));
  u = _mm512_max_ps(u, _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_max_ps(u, _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
}

#endif
