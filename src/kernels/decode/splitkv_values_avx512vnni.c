/* Split-KV decode values from an I8 or U8 V cache by AVX512-VNNI integer
 * dot products (VPDPWSSD), for the chunks whose scores are integer ones
 * too (decode_splitkv_i16dot__avx512vnni.c). Per slot and block, the weights
 * times their row's scale are rounded to int16 against the block's largest (a
 * step of at most 2^-16 of it: far below V's own 8-bit rounding); two keys'
 * codes, widened to int16 and interleaved, meet a broadcast pair of weights, so
 * one instruction does 2 keys x 16 columns. Per key and 32 columns that is 2
 * widening and interleaving steps and 4 dot products per 4 slots, against 6
 * conversions and 8 FMAs on the f32 path. The block's int32 sums go to o once:
 * o = alpha o + step (sum - sum_j code_j zero_j). */
#include <float.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { CHUNK = FC_SPLITKV_CHUNK, BLOCK = FC_SPLITKV_KEY_BLOCK, PASS = 64 };

/* false: some slot's weights cannot be rounded (the f32 path takes the
 * block). Keys past n and keys a slot does not see weigh 0. */
static ALWAYS_INLINE bool round_weights(const fc_splitkv_rows *v,
                                        flashcpu_dtype dtype, int64_t n,
                                        const float *weights,
                                        const unsigned *seen,
                                        fc_splitkv_int_weights *out) {
  const __m512 scale = _mm512_loadu_ps(v->scale);
  const __mmask16 keys = fc512_tail_mask(n);
  __m512 w[CHUNK], size[CHUNK];
  __mmask16 not_finite = 0;
  for (int s = 0; s < CHUNK; s++) {
    w[s] = _mm512_maskz_mul_ps((__mmask16)(seen[s] & keys),
                               _mm512_loadu_ps(weights + s * BLOCK), scale);
    size[s] = _mm512_abs_ps(w[s]);
    not_finite |=
        _mm512_cmp_ps_mask(size[s], _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
  }
  if (not_finite) return false; /* NaN or inf */
  /* The 4 slots' largest in one tree (lane s), not 4 reductions. */
  float largest[16];
  _mm512_storeu_ps(largest, fc512_max4_by_lane(size));
  __m512i codes[CHUNK];
  for (int s = 0; s < CHUNK; s++) {
    if (largest[s] == 0.0f) {
      codes[s] = _mm512_setzero_si512();
      out->step[s] = 0.0f;
      continue;
    }
    const float inverse = 32767.0f / largest[s];
    if (!(inverse <= FLT_MAX)) return false;
    codes[s] = _mm512_cvtps_epi32(_mm512_mul_ps(w[s], _mm512_set1_ps(inverse)));
    out->step[s] = largest[s] / 32767.0f;
  }
  const __m512 zero = _mm512_loadu_ps(v->zero);
  for (int s = 0; s < CHUNK; s++) {
    _mm256_storeu_si256((__m256i *)out->pairs[s],
                        _mm512_cvtepi32_epi16(codes[s]));
    out->offset[s] = dtype == FLASHCPU_DTYPE_U8
                         ? _mm512_reduce_add_ps(_mm512_mul_ps(
                               _mm512_cvtepi32_ps(codes[s]), zero))
                         : 0.0f;
  }
  return true;
}

/* 32 codes of a row from column d (past dv: 0) as int16. */
static ALWAYS_INLINE __m512i widen(const char *row, flashcpu_dtype dtype,
                                   int64_t d, __mmask32 mask) {
  const __m256i raw = _mm256_maskz_loadu_epi8(mask, row + d);
  return dtype == FLASHCPU_DTYPE_U8 ? _mm512_cvtepu8_epi16(raw)
                                    : _mm512_cvtepi8_epi16(raw);
}

static ALWAYS_INLINE void
values_int16(const fc_splitkv_rows *v, flashcpu_dtype dtype, int64_t dv,
             int64_t padded_dv, int64_t n, float *o, const float *alpha,
             const fc_splitkv_int_weights *w, fc_prefetch_sweep *shared) {
  const bool prefetch = shared != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared);
  /* The interleave leaves 128-bit lane L of the low half with columns 8L ..
   * 8L + 3 and of the high half with 8L + 4 .. 8L + 7: put back in order. */
  const __m512i first =
      _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13,
                                           14, 15, 28, 29, 30, 31);
  for (int64_t d = 0; d < dv; d += PASS) {
    __mmask32 masks[2];
    for (int g = 0; g < 2; g++) {
      const int64_t left = dv - d - 32 * g;
      masks[g] = left >= 32  ? (__mmask32)0xffffffffu
                 : left <= 0 ? (__mmask32)0
                             : (__mmask32)((1u << left) - 1u);
    }
    __m512i acc[CHUNK][4];
    for (int s = 0; s < CHUNK; s++)
      for (int x = 0; x < 4; x++) acc[s][x] = _mm512_setzero_si512();
    for (int64_t j = 0; j < n; j += 2) {
      if (prefetch) {
        fc_sweep_next(&sweep);
        if (j + 1 < n) fc_sweep_next(&sweep);
      }
      for (int g = 0; g < 2; g++) {
        const __m512i a = widen(v->row[j], dtype, d + 32 * g, masks[g]);
        const __m512i b = widen(v->row[j + 1], dtype, d + 32 * g, masks[g]);
        const __m512i low = _mm512_unpacklo_epi16(a, b);
        const __m512i high = _mm512_unpackhi_epi16(a, b);
        for (int s = 0; s < CHUNK; s++) {
          const __m512i pair = _mm512_set1_epi32(w->pairs[s][j / 2]);
          acc[s][2 * g] = _mm512_dpwssd_epi32(acc[s][2 * g], low, pair);
          acc[s][2 * g + 1] =
              _mm512_dpwssd_epi32(acc[s][2 * g + 1], high, pair);
        }
      }
    }
    for (int s = 0; s < CHUNK; s++) {
      const __m512 factor = _mm512_set1_ps(alpha[s]);
      const __m512 step = _mm512_set1_ps(w->step[s]);
      const __m512 offset = _mm512_set1_ps(w->offset[s]);
      for (int g = 0; g < 2; g++) {
        const __m512i lo = acc[s][2 * g], hi = acc[s][2 * g + 1];
        const __m512i sums[2] = {_mm512_permutex2var_epi32(lo, first, hi),
                                 _mm512_permutex2var_epi32(lo, second, hi)};
        for (int h = 0; h < 2; h++) {
          float *out = o + s * padded_dv + d + 32 * g + 16 * h;
          __m512 sum = _mm512_cvtepi32_ps(sums[h]);
          if (dtype == FLASHCPU_DTYPE_U8) sum = _mm512_sub_ps(sum, offset);
          _mm512_storeu_ps(
              out, _mm512_fmadd_ps(
                       step, sum, _mm512_mul_ps(_mm512_loadu_ps(out), factor)));
        }
      }
    }
  }
  if (prefetch) *shared = sweep;
}

bool fc_splitkv_values_i16dot__avx512vnni(
    const fc_splitkv_rows *v, flashcpu_dtype dtype, int64_t dv,
    int64_t padded_dv, int64_t n, float *o, const float *weights,
    const float *alpha, const unsigned *seen, fc_prefetch_sweep *sweep) {
  fc_splitkv_int_weights w;
  if (!round_weights(v, dtype, n, weights, seen, &w)) return false;
#define VALUES_FOR(dt, dim_value)                                              \
  values_int16(v, dt, dim_value, padded_dv, n, o, alpha, &w, sweep)
  FC_SPLITKV_BY_INT_DTYPE(dtype, dv, VALUES_FOR);
#undef VALUES_FOR
  return true;
}
