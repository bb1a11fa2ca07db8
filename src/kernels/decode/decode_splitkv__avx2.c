/* Split-KV decode for AVX2 + FMA: the fcv_* micro-kernels
 * (decode_splitkv_vec.inc) with 8-lane vectors (2 keys x 4 slots of dot
 * products reduce together) and 2 vectors of output columns x 4 slots in
 * registers (8 accumulators of 16 registers); rows are read where they
 * lie, 16 elements at a time, quantized ones dequantized in registers. */
#include <stdint.h>

#include "flashcpu/flashcpu.h"
#include "simd/quant_codes_avx2.h"
#include "simd/vec_lanes_avx2.h"

/* Elements d .. d + 15 of a row as f32: f32, f16 and quantized rows in
 * order, bf16 even elements in lo and odd ones in hi (a shift and an and,
 * no shuffle). */
static inline __attribute__((always_inline)) void
ds_load_pair(const char *row, flashcpu_dtype dtype, int64_t d, float scale,
             float zero, fcv *lo, fcv *hi) {
  if (fc_dtype_is_quantized(dtype)) {
    *lo = fc256_dequant_lanes(dtype, row, d, scale, zero);
    *hi = fc256_dequant_lanes(dtype, row, d + 8, scale, zero);
  } else if (dtype == FLASHCPU_DTYPE_BF16) {
    const __m256i raw =
        _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    *hi = _mm256_castsi256_ps(
        _mm256_and_si256(raw, _mm256_set1_epi32((int)0xffff0000u)));
  } else if (dtype == FLASHCPU_DTYPE_F16) {
    const uint16_t *half = (const uint16_t *)row + d;
    *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)half));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(half + 8)));
  } else {
    *lo = _mm256_loadu_ps((const float *)row + d);
    *hi = _mm256_loadu_ps((const float *)row + d + 8);
  }
}

/* Elements d .. d + 15 of an E4M3 row holding no NaN code, as
 * ds_load_pair's bits: the sign-extended codes shifted to f16s of value *
 * 2^-8 with bit 14 cleared (3 steps per 16 where the NaN-aware widening
 * takes 10 per 8), times folded = scale * 2^8. */
static inline __attribute__((always_inline)) void
ds_load_e4m3_finite(const char *row, int64_t d, float folded, fcv *lo,
                    fcv *hi) {
  const __m256i half = _mm256_and_si256(
      _mm256_slli_epi16(
          _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + d))), 7),
      _mm256_set1_epi16((short)0xbf80));
  const __m256 scale = _mm256_set1_ps(folded);
  *lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)), scale);
  *hi =
      _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)), scale);
}

/* Whether none of n rows' first dim E4M3 codes (dim a multiple of 16) is
 * a NaN code (0x7f or 0xff). */
static inline int ds_e4m3_rows_finite(const char *const *rows, int64_t n,
                                      int64_t dim) {
  const __m256i sign = _mm256_set1_epi8((char)0x80),
                ones = _mm256_set1_epi8(-1);
  __m256i nan = _mm256_setzero_si256();
  for (int64_t j = 0; j < n; j++) {
    int64_t d = 0;
    for (; d + 32 <= dim; d += 32) {
      const __m256i codes = _mm256_loadu_si256((const __m256i *)(rows[j] + d));
      nan = _mm256_or_si256(
          nan, _mm256_cmpeq_epi8(_mm256_or_si256(codes, sign), ones));
    }
    if (d < dim) {
      const __m256i codes = _mm256_zextsi128_si256(
          _mm_loadu_si128((const __m128i *)(rows[j] + d)));
      nan = _mm256_or_si256(
          nan, _mm256_cmpeq_epi8(_mm256_or_si256(codes, sign), ones));
    }
  }
  return _mm256_testz_si256(nan, nan);
}

#define DS_VALUE_VECTORS 2
#define DS_VEC_READS_QUANTIZED 1
#define DS_NAME(what) fc_splitkv_##what##__avx2
#define DS_KERNEL fc_decode_splitkv__avx2

#include "kernels/decode/decode_splitkv_vec.inc"

flashcpu_status fc_splitkv_plan_avx2_int(const fc_kernel_env *env,
                                         const fc_problem *p,
                                         fc_kernel_plan *plan,
                                         fc_splitkv_int_scores_fn int_scores,
                                         fc_splitkv_int_values_fn int_values) {
  return DS_NAME(plan)(env, p, plan, NULL, int_scores, int_values, 16383);
}
