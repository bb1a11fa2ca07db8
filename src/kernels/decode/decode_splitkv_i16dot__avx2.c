/* Split-KV decode from I8 and U8 K/V caches by AVX2 integer dot products
 * (VPMADDWD: 16 int16 pairs into 8 int32 sums), the AVX2 counterpart of
 * decode_splitkv_i16dot__avx512vnni.c and splitkv_values_avx512vnni.c, with
 * their rounding: q as 15-bit integers per row (the driver's round_q), each
 * slot's block of weights times the rows' scales as int16 against the
 * block's largest. On AVX2 the f32 path is bound by its multiplies (two
 * FMA pipes: 4 slots x 128 elements x 2 products per key and kv head, plus
 * the conversions); the integer path halves them (a VPMADDWD does 16
 * multiplies) and drops the conversions from codes to f32.
 *  - scores: 2 keys x 4 slots of int32 sums stay in registers across
 *    head_dim, one widening per key and 16 elements, summed across lanes
 *    by a VPHADDD tree;
 *  - values: two keys' codes interleaved bytewise and widened give 8
 *    columns of (key j, key j + 1) pairs for a broadcast pair of weights;
 *    2 x 8 columns x 4 slots of int32 sums per pass stay in registers
 *    across the block. */
#include <float.h>
#include <immintrin.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/registry.h"
#include "simd/simd_avx2.h"
#include "simd/vec_lanes_avx2.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { CHUNK = FC_SPLITKV_CHUNK, BLOCK = FC_SPLITKV_KEY_BLOCK, STEP = 16 };

/* 16 codes of a row from element d as int16. */
static ALWAYS_INLINE __m256i widen16(const char *row, flashcpu_dtype dtype,
                                     int64_t d) {
  const __m128i raw = _mm_loadu_si128((const __m128i *)(row + d));
  return dtype == FLASHCPU_DTYPE_U8 ? _mm256_cvtepu8_epi16(raw)
                                    : _mm256_cvtepi8_epi16(raw);
}

/* scores[s * 16 + j] = q_s . k_j for j < n (the rest garbage), exact sums
 * of the codes scaled as the AVX512-VNNI scores are. dim: a multiple of
 * 16 (rows read in place on AVX2 are). */
static ALWAYS_INLINE void scores_int16(const fc_splitkv_rows *k,
                                       flashcpu_dtype dtype,
                                       const fc_splitkv_int_q *q, int64_t dim,
                                       int64_t n, fc_prefetch_sweep *shared,
                                       float *out) {
  const bool prefetch = shared != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared);
  int32_t sums[CHUNK * BLOCK] = {0}; /* [slot][key] */
  for (int64_t j0 = 0; j0 < n; j0 += 2) {
    __m256i acc[8]; /* acc[slot * 2 + key] */
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
    for (int64_t d = 0; d < dim; d += STEP) {
      if (prefetch && d % FC_SWEEP_LINE == 0) {
        fc_sweep_next(&sweep);
        fc_sweep_next(&sweep);
      }
      const __m256i k0 = widen16(k->row[j0], dtype, d);
      const __m256i k1 = widen16(k->row[j0 + 1], dtype, d);
      for (int s = 0; s < CHUNK; s++) {
        const __m256i qs =
            _mm256_loadu_si256((const __m256i *)(q->codes + s * q->stride + d));
        acc[2 * s] = _mm256_add_epi32(acc[2 * s], _mm256_madd_epi16(qs, k0));
        acc[2 * s + 1] =
            _mm256_add_epi32(acc[2 * s + 1], _mm256_madd_epi16(qs, k1));
      }
    }
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, fc256_sum8_by_lane_as(acc, 1));
    for (int s = 0; s < CHUNK; s++) {
      sums[s * BLOCK + j0] = lanes[2 * s];
      sums[s * BLOCK + j0 + 1] = lanes[2 * s + 1];
    }
  }
  if (prefetch) *shared = sweep;
  for (int s = 0; s < CHUNK; s++) {
    for (int h = 0; h < BLOCK; h += 8) {
      __m256 value = _mm256_cvtepi32_ps(
          _mm256_loadu_si256((const __m256i *)(sums + s * BLOCK + h)));
      if (dtype == FLASHCPU_DTYPE_U8)
        value = _mm256_fnmadd_ps(_mm256_loadu_ps(k->zero + h),
                                 _mm256_set1_ps(q->sum[s]), value);
      value = _mm256_mul_ps(_mm256_mul_ps(value, _mm256_loadu_ps(k->scale + h)),
                            _mm256_set1_ps(q->scale[s]));
      _mm256_storeu_ps(out + s * BLOCK + h, fc256_saturate(value));
    }
  }
}

static void int16_scores(const fc_splitkv_rows *k, flashcpu_dtype dtype,
                         const fc_splitkv_int_q *q, int64_t dim, int64_t n,
                         fc_prefetch_sweep *sweep, float *out) {
#define SCORES_FOR(dt, dim_value)                                              \
  scores_int16(k, dt, q, dim_value, n, sweep, out)
  FC_SPLITKV_BY_INT_DTYPE(dtype, dim, SCORES_FOR);
#undef SCORES_FOR
}

/* Lanes of 8 keys from key `first` that bits has, as an all-ones mask. */
static ALWAYS_INLINE __m256 key_mask(unsigned bits, int first) {
  const __m256i lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i have =
      _mm256_and_si256(_mm256_set1_epi32((int)(bits >> first)), lane_bits);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(have, lane_bits));
}

static ALWAYS_INLINE float max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static ALWAYS_INLINE float sum8(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/* false: some slot's weights cannot be rounded (the f32 path takes the
 * block). Keys past n and keys a slot does not see weigh 0. */
static ALWAYS_INLINE bool round_weights(const fc_splitkv_rows *v,
                                        flashcpu_dtype dtype, int64_t n,
                                        const float *weights,
                                        const unsigned *seen,
                                        fc_splitkv_int_weights *out) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 finite_max = _mm256_set1_ps(FLT_MAX);
  const unsigned keys = (1u << n) - 1u;
  __m256i codes[CHUNK][2];
  for (int s = 0; s < CHUNK; s++) {
    __m256 w[2], size[2];
    for (int h = 0; h < 2; h++) {
      w[h] = _mm256_and_ps(
          key_mask(seen[s] & keys, 8 * h),
          _mm256_mul_ps(_mm256_loadu_ps(weights + s * BLOCK + 8 * h),
                        _mm256_loadu_ps(v->scale + 8 * h)));
      size[h] = _mm256_and_ps(w[h], magnitude);
      if (_mm256_movemask_ps(_mm256_cmp_ps(size[h], finite_max, _CMP_NLE_UQ)))
        return false; /* NaN or inf */
    }
    const float largest = max8(_mm256_max_ps(size[0], size[1]));
    if (largest == 0.0f) {
      codes[s][0] = codes[s][1] = _mm256_setzero_si256();
      out->step[s] = 0.0f;
      continue;
    }
    const float inverse = 32767.0f / largest;
    if (!(inverse <= FLT_MAX)) return false;
    for (int h = 0; h < 2; h++)
      codes[s][h] =
          _mm256_cvtps_epi32(_mm256_mul_ps(w[h], _mm256_set1_ps(inverse)));
    out->step[s] = largest / 32767.0f;
  }
  for (int s = 0; s < CHUNK; s++) {
    /* packs works per 128-bit half: 0..3, 8..11, 4..7, 12..15; 0xd8 puts
     * the quarters back in order. */
    _mm256_storeu_si256(
        (__m256i *)out->pairs[s],
        _mm256_permute4x64_epi64(_mm256_packs_epi32(codes[s][0], codes[s][1]),
                                 0xd8));
    out->offset[s] = 0.0f;
    if (dtype == FLASHCPU_DTYPE_U8)
      out->offset[s] =
          sum8(_mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(codes[s][0]),
                                           _mm256_loadu_ps(v->zero)),
                             _mm256_mul_ps(_mm256_cvtepi32_ps(codes[s][1]),
                                           _mm256_loadu_ps(v->zero + 8))));
  }
  return true;
}

/* Columns d .. d + 15 of keys j and j + 1: (j, j + 1) pairs of columns
 * d .. d + 7 in *low and d + 8 .. d + 15 in *high. */
static ALWAYS_INLINE void interleave(const char *a, const char *b,
                                     flashcpu_dtype dtype, int64_t d,
                                     __m256i *low, __m256i *high) {
  const __m128i x = _mm_loadu_si128((const __m128i *)(a + d));
  const __m128i y = _mm_loadu_si128((const __m128i *)(b + d));
  const __m128i lo = _mm_unpacklo_epi8(x, y), hi = _mm_unpackhi_epi8(x, y);
  if (dtype == FLASHCPU_DTYPE_U8) {
    *low = _mm256_cvtepu8_epi16(lo);
    *high = _mm256_cvtepu8_epi16(hi);
  } else {
    *low = _mm256_cvtepi8_epi16(lo);
    *high = _mm256_cvtepi8_epi16(hi);
  }
}

static ALWAYS_INLINE void
values_int16(const fc_splitkv_rows *v, flashcpu_dtype dtype, int64_t dv,
             int64_t padded_dv, int64_t n, float *o, const float *alpha,
             const fc_splitkv_int_weights *w, fc_prefetch_sweep *shared) {
  const bool prefetch = shared != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared);
  for (int64_t d = 0; d < dv; d += STEP) {
    __m256i acc[CHUNK][2];
    for (int s = 0; s < CHUNK; s++)
      acc[s][0] = acc[s][1] = _mm256_setzero_si256();
    const bool starts_line = d % FC_SWEEP_LINE == 0;
    for (int64_t j = 0; j < n; j += 2) {
      if (prefetch && starts_line) {
        fc_sweep_next(&sweep);
        if (j + 1 < n) fc_sweep_next(&sweep);
      }
      __m256i low, high;
      interleave(v->row[j], v->row[j + 1], dtype, d, &low, &high);
      for (int s = 0; s < CHUNK; s++) {
        const __m256i pair = _mm256_set1_epi32(w->pairs[s][j / 2]);
        acc[s][0] = _mm256_add_epi32(acc[s][0], _mm256_madd_epi16(low, pair));
        acc[s][1] = _mm256_add_epi32(acc[s][1], _mm256_madd_epi16(high, pair));
      }
    }
    for (int s = 0; s < CHUNK; s++) {
      const __m256 factor = _mm256_set1_ps(alpha[s]);
      const __m256 step = _mm256_set1_ps(w->step[s]);
      const __m256 offset = _mm256_set1_ps(w->offset[s]);
      for (int h = 0; h < 2; h++) {
        float *out = o + s * padded_dv + d + 8 * h;
        __m256 sum = _mm256_cvtepi32_ps(acc[s][h]);
        if (dtype == FLASHCPU_DTYPE_U8) sum = _mm256_sub_ps(sum, offset);
        _mm256_storeu_ps(
            out, _mm256_fmadd_ps(step, sum,
                                 _mm256_mul_ps(_mm256_loadu_ps(out), factor)));
      }
    }
  }
  if (prefetch) *shared = sweep;
}

static bool int16_values(const fc_splitkv_rows *v, flashcpu_dtype dtype,
                         int64_t dv, int64_t padded_dv, int64_t n, float *o,
                         const float *weights, const float *alpha,
                         const unsigned *seen, fc_prefetch_sweep *sweep) {
  fc_splitkv_int_weights w;
  if (!round_weights(v, dtype, n, weights, seen, &w)) return false;
#define VALUES_FOR(dt, dim_value)                                              \
  values_int16(v, dt, dim_value, padded_dv, n, o, alpha, &w, sweep)
  FC_SPLITKV_BY_INT_DTYPE(dtype, dv, VALUES_FOR);
#undef VALUES_FOR
  return true;
}

/* The AVX2 split-KV kernel with these scores and values (registry row). */
flashcpu_status fc_decode_splitkv_i16dot__avx2(const fc_kernel_env *env,
                                               const fc_problem *p,
                                               fc_kernel_plan *plan) {
  return fc_splitkv_plan_avx2_int(env, p, plan, int16_scores, int16_values);
}
