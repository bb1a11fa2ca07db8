/* F8 codes for the AMX-BF16 F8 decode kernel
 * (decode_splitkv_amx_f8__amxbf16.c): E4M3 and E5M2 codes widened exactly
 * to bf16 by two 128-entry byte tables (AVX512-VBMI's two-register byte
 * shuffle; the sign ORed in), as rows or two keys a dword, and f32
 * weights split exactly into three bf16 parts. Include in a TU built with
 * AVX-512, AVX512-BF16 and AVX512-VBMI flags. */
#ifndef FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_F8_CODES_H
#define FLASHCPU_KERNELS_DECODE_SPLITKV_AMX_F8_CODES_H

#include <immintrin.h>
#include <stdint.h>

#include "common/dtype_convert.h"
#include "common/quant.h"
#include "flashcpu/flashcpu.h"

enum { CODES = 128 }; /* table entries: the codes without the sign */

/* A dtype's codes 0..127 as bf16 (low and high bytes), and the order
 * widen64 takes codes in. */
typedef struct f8_tables {
  uint8_t lo[CODES], hi[CODES], order[64];
} f8_tables;

static inline void make_tables(flashcpu_dtype dtype, f8_tables *t) {
  for (int code = 0; code < CODES; code++) {
    const float value = dtype == FLASHCPU_DTYPE_F8_E4M3
                            ? fc_e4m3_to_f32((uint8_t)code)
                            : fc_e5m2_to_f32((uint8_t)code);
    const uint32_t bits = fc_f32_bits(value) >> 16;
    t->lo[code] = (uint8_t)(bits & 0xffu);
    t->hi[code] = (uint8_t)(bits >> 8);
  }
  /* Byte 16 L + j of the codes reordered from code 8 L + j (j < 8) and
   * 32 + 8 L + j - 8 (j >= 8): the unpacks then give codes 0..31 and
   * 32..63 in order. */
  for (int at = 0; at < 64; at++) {
    const int lane = at / 16, j = at % 16;
    t->order[at] = (uint8_t)(j < 8 ? 8 * lane + j : 32 + 8 * lane + j - 8);
  }
}

/* The tables in registers. */
typedef struct f8_widen {
  __m512i lo0, lo1, hi0, hi1, order;
} f8_widen;

static inline __attribute__((always_inline)) f8_widen
widen_of(const f8_tables *t) {
  const f8_widen w = {_mm512_loadu_si512(t->lo), _mm512_loadu_si512(t->lo + 64),
                      _mm512_loadu_si512(t->hi), _mm512_loadu_si512(t->hi + 64),
                      _mm512_loadu_si512(t->order)};
  return w;
}

/* 64 codes (the last 32 zero where only 32 remain) to 2 x 32 bf16. */
static inline __attribute__((always_inline)) void
widen64(const f8_widen *w, __m512i codes, __m512i *first, __m512i *second) {
  const __m512i c = _mm512_permutexvar_epi8(w->order, codes);
  const __m512i lo = _mm512_permutex2var_epi8(w->lo0, c, w->lo1);
  __m512i hi = _mm512_permutex2var_epi8(w->hi0, c, w->hi1);
  hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8((char)0x80), 0xf8);
  *first = _mm512_unpacklo_epi8(lo, hi);
  *second = _mm512_unpackhi_epi8(lo, hi);
}

/* A row of dim codes to bf16. */
static inline __attribute__((always_inline)) void
widen_row(const f8_widen *w, const char *row, int64_t dim, uint16_t *out) {
  int64_t d = 0;
  for (; d + 64 <= dim; d += 64) {
    __m512i first, second;
    widen64(w, _mm512_loadu_si512(row + d), &first, &second);
    _mm512_storeu_si512(out + d, first);
    _mm512_storeu_si512(out + d + 32, second);
  }
  if (d < dim) {
    __m512i first, second;
    widen64(w, _mm512_maskz_loadu_epi8(0xffffffffu, row + d), &first, &second);
    _mm512_storeu_si512(out + d, first);
  }
}

/* 16 bf16 values as f32. */
static inline __attribute__((always_inline)) __m512
bf16x16(const uint16_t *at) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)at)), 16));
}

/* Keys 2 r and 2 r + 1 of a group's half (rows a and b) into row r of its
 * V tiles: tile 4 m + q holds, per 64 columns m, columns 64 m + 16 L + 4 q
 * + i (L, i < 4) at dword 4 L + i, each dword the two keys' bf16. */
static inline __attribute__((always_inline)) void
widen_pair(const f8_widen *w, const char *row_a, const char *row_b, int64_t dim,
           uint32_t *tiles, int r) {
  const __m512i sign = _mm512_set1_epi8((char)0x80);
  for (int64_t m = 0; 64 * m < dim; m++) {
    const __mmask64 bytes = dim - 64 * m >= 64 ? ~(__mmask64)0 : 0xffffffffu;
    const __m512i a = _mm512_maskz_loadu_epi8(bytes, row_a + 64 * m);
    const __m512i b = _mm512_maskz_loadu_epi8(bytes, row_b + 64 * m);
    /* the two keys' codes interleaved first: the tables' bytes then
     * unpack straight into (a, b) dwords */
    const __m512i ab[2] = {_mm512_unpacklo_epi8(a, b),
                           _mm512_unpackhi_epi8(a, b)};
    uint32_t *at = tiles + (4 * m * 16 + r) * 16;
    for (int k = 0; k < 2; k++) {
      const __m512i lo = _mm512_permutex2var_epi8(w->lo0, ab[k], w->lo1);
      const __m512i hi = _mm512_ternarylogic_epi32(
          _mm512_permutex2var_epi8(w->hi0, ab[k], w->hi1), ab[k], sign, 0xf8);
      _mm512_store_si512(at + 2 * k * 16 * 16, _mm512_unpacklo_epi8(lo, hi));
      _mm512_store_si512(at + (2 * k + 1) * 16 * 16,
                         _mm512_unpackhi_epi8(lo, hi));
    }
  }
}

/* Two vectors of 16 f32 weights (w[0]: keys 0..15, w[1]: 16..31) split
 * exactly into bf16 hi + lo + lo2, each part a row of 32 bf16 in key order
 * at out + part * stride (w is left with nothing). */
static inline __attribute__((always_inline)) void
fc_amx_bf16_parts(__m512 w[2], uint16_t *out, int64_t stride) {
  for (int part = 0; part < 3; part++) {
    const __m512i row = (__m512i)_mm512_cvtne2ps_pbh(w[1], w[0]);
    _mm512_store_si512(out + part * stride, row);
    const __m512 first = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_castsi512_si256(row)), 16));
    const __m512 second = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(row, 1)), 16));
    w[0] = _mm512_sub_ps(w[0], first);
    w[1] = _mm512_sub_ps(w[1], second);
  }
}

#endif
