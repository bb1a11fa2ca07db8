/* Split-KV decode scores from bf16 q and an F8_E4M3 or F8_E5M2 K read in
 * place, by AVX512-BF16 dot products: every fp8 value is a bf16 value, so
 * 32 codes at a time are rebuilt as bf16 in registers (a shift, an and and
 * an add; zeros and subnormals from a 32-entry table) and fed to
 * VDPBF16PS against the raw q, and each key's sum is multiplied by its
 * row's scale. The products are exact; the sums round in another order
 * than the f32 path's and the scale multiplies the sum instead of each
 * element, so the bytes are not the dequantized cache's, within f32
 * rounding of them. About half the vector instructions of widening K to
 * f32 (a widening, a shift, an and, a two-uop conversion and a multiply
 * per 16 codes there). Blocks holding NaN or inf codes take a widening to
 * f32 that keeps them. */
#include <math.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/decode/splitkv_bf16_dot.h"
#include "kernels/decode/splitkv_common.h"
#include "kernels/registry.h"
#include "simd/lanes_avx512.h"
#include "simd/quant_codes_avx512.h"
#include "simd/simd_avx512.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
  PAIR = 32,
  GROUPS = FC_SPLITKV_KEY_BLOCK / FC_SPLITKV_KEYS_PER_GROUP,
  ACCS = FC_SPLITKV_CHUNK * FC_SPLITKV_KEYS_PER_GROUP
};

/* How a format's code becomes bf16 bits: the sign-extended code shifted
 * left by `shift`, `keep` kept (sign, exponent and mantissa in bf16's
 * places), `bias` added to the exponent (127 minus the format's bias).
 * Codes whose exponent bits (`exponent`) are zero (zeros, subnormals) come
 * from `table` by their low 5 bits instead; codes with every exponent bit
 * set (`special`: E4M3's NaN, E5M2's inf and NaN) are not rebuilt. */
typedef struct fp8_format {
  int shift;
  short keep, bias, exponent;
  unsigned char special; /* the magnitude bits a special code has set */
} fp8_format;

static const fp8_format E4M3 = {4, 0x07f0, 0x3c00, 0x78, 0x7f};
static const fp8_format E5M2 = {5, 0x0fe0, 0x3800, 0x7c, 0x7c};

/* bf16 bits of m * 2^-9 (E4M3's subnormals, m = 0..7) and of m * 2^-16
 * (E5M2's, m = 0..3), indexed by the code's low 5 bits (their exponent
 * bits are zero there); the other entries are never selected. */
static const uint16_t E4M3_SMALL[32] = {0x0000, 0x3b00, 0x3b80, 0x3bc0,
                                        0x3c00, 0x3c20, 0x3c40, 0x3c60};
static const uint16_t E5M2_SMALL[32] = {0x0000, 0x3780, 0x3800, 0x3840};

/* 32 codes (lanes outside mask read nothing and are zero) as bf16. */
static ALWAYS_INLINE __m512i fp8_to_bf16(const char *codes, __mmask32 mask,
                                         const fp8_format *f, __m512i small) {
  const __m512i wide =
      _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, codes));
  const __m512i magnitude = _mm512_and_si512(_mm512_slli_epi16(wide, f->shift),
                                             _mm512_set1_epi16(f->keep));
  __m512i bits = _mm512_add_epi16(magnitude, _mm512_set1_epi16(f->bias));
  const __mmask32 tiny =
      _mm512_testn_epi16_mask(wide, _mm512_set1_epi16(f->exponent));
  bits = _mm512_mask_permutexvar_epi16(bits, tiny, wide, small);
  /* bits | (wide & 0x8000): the code's sign */
  return _mm512_ternarylogic_epi32(bits, wide, _mm512_set1_epi16((short)0x8000),
                                   0xf8);
}

/* The block's sums q_s . code_j by dot products, [slot][key] in 16 lanes
 * per slot (lanes past n garbage). */
static ALWAYS_INLINE void dot_sums(const char *const *k_rows, const uint16_t *q,
                                   int64_t q_stride, int64_t dim, int64_t n,
                                   const fp8_format *f,
                                   const uint16_t *small_table,
                                   fc_prefetch_sweep *shared_sweep,
                                   __m512 sums[FC_SPLITKV_CHUNK]) {
  const bool prefetch = shared_sweep != NULL;
  fc_prefetch_sweep sweep = fc_sweep_copy(shared_sweep);
  const __m512i small = _mm512_loadu_si512(small_table);
  __m512 groups[GROUPS];
  for (int g = 0; g < GROUPS; g++) {
    if (g * FC_SPLITKV_KEYS_PER_GROUP >= n) {
      groups[g] = _mm512_setzero_ps();
      continue;
    }
    __m512 acc[ACCS];
    for (int i = 0; i < ACCS; i++) acc[i] = _mm512_setzero_ps();
    const char *rows[FC_SPLITKV_KEYS_PER_GROUP];
    for (int j = 0; j < FC_SPLITKV_KEYS_PER_GROUP; j++)
      rows[j] = k_rows[g * FC_SPLITKV_KEYS_PER_GROUP + j];
#pragma GCC unroll 8
    for (int64_t d = 0; d < dim; d += PAIR) {
      const int64_t left = dim - d;
      const __mmask32 mask = left >= PAIR ? (__mmask32)0xffffffffu
                                          : (__mmask32)((1u << left) - 1u);
      __m512bh k[FC_SPLITKV_KEYS_PER_GROUP];
      for (int j = 0; j < FC_SPLITKV_KEYS_PER_GROUP; j++)
        k[j] = (__m512bh)fp8_to_bf16(rows[j] + d, mask, f, small);
      /* a line per line the span starts: every other span */
      if (prefetch && d % FC_SWEEP_LINE == 0)
        for (int j = 0; j < FC_SPLITKV_KEYS_PER_GROUP; j++)
          fc_sweep_next(&sweep);
      fc_splitkv_bf16_dot_step(acc, q, q_stride, d, k);
    }
    groups[g] = fc512_sum16_by_lane(acc);
  }
  if (prefetch) *shared_sweep = sweep;
  fc512_transpose_128x4(groups, sums);
}

/* The same sums from codes widened to f32 with their NaN and inf (the
 * kernel's dequantizing loads, scale 1), for blocks that hold them. */
static void widened_sums(const char *const *k_rows, flashcpu_dtype dtype,
                         const uint16_t *q, int64_t q_stride, int64_t dim,
                         int64_t n, fc_prefetch_sweep *sweep,
                         __m512 sums[FC_SPLITKV_CHUNK]) {
  float out[FC_SPLITKV_CHUNK][FC_SPLITKV_KEY_BLOCK] = {{0}};
  for (int64_t j = 0; j < n; j++)
    for (int64_t d = 0; d < dim; d += FC_SWEEP_LINE)
      if (sweep) fc_sweep_next(sweep);
  for (int s = 0; s < FC_SPLITKV_CHUNK; s++)
    for (int64_t j = 0; j < n; j++) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t d = 0; d < dim; d += 16) {
        const __mmask16 m = fc512_tail_mask(dim - d);
        const __m512 qs =
            fc512_load(q + s * q_stride, FLASHCPU_DTYPE_BF16, d, m);
        acc = _mm512_fmadd_ps(
            qs, fc512_dequant_lanes(dtype, k_rows[j], d, m, 1.0f, 0.0f), acc);
      }
      out[s][j] = _mm512_reduce_add_ps(acc);
    }
  for (int s = 0; s < FC_SPLITKV_CHUNK; s++) sums[s] = _mm512_loadu_ps(out[s]);
}

/* Each format and head_dim 64 and 128 get their own unrolled copy, with
 * the format's constants in the instructions. */
#define DOT_SUMS_BY_DIM(format, table)                                         \
  do {                                                                         \
    if (dim == 128)                                                            \
      dot_sums(k->row, q, q_stride, 128, n, format, table, sweep, sums);       \
    else if (dim == 64)                                                        \
      dot_sums(k->row, q, q_stride, 64, n, format, table, sweep, sums);        \
    else                                                                       \
      dot_sums(k->row, q, q_stride, dim, n, format, table, sweep, sums);       \
  } while (0)

static void sums_of(const fc_splitkv_rows *k, flashcpu_dtype dtype,
                    const uint16_t *q, int64_t q_stride, int64_t dim, int64_t n,
                    fc_prefetch_sweep *sweep, __m512 sums[FC_SPLITKV_CHUNK]) {
  const int e4m3 = dtype == FLASHCPU_DTYPE_F8_E4M3;
  if (fc512_rows_have_bits(k->row, n, dim, e4m3 ? E4M3.special : E5M2.special))
    widened_sums(k->row, dtype, q, q_stride, dim, n, sweep, sums);
  else if (e4m3)
    DOT_SUMS_BY_DIM(&E4M3, E4M3_SMALL);
  else
    DOT_SUMS_BY_DIM(&E5M2, E5M2_SMALL);
}
#undef DOT_SUMS_BY_DIM

static void fp8_scores(const fc_splitkv_rows *k, flashcpu_dtype k_dtype,
                       const uint16_t *q, int64_t q_stride, int64_t dim,
                       int64_t n, float factor, fc_prefetch_sweep *sweep,
                       float *out) {
  __m512 sums[FC_SPLITKV_CHUNK];
  sums_of(k, k_dtype, q, q_stride, dim, n, sweep, sums);
  /* the row's scale, then the score factor: lanes past n repeat a row */
  const __m512 scale = _mm512_loadu_ps(k->scale);
  const __m512 f = _mm512_set1_ps(factor);
  for (int s = 0; s < FC_SPLITKV_CHUNK; s++)
    _mm512_storeu_ps(
        out + s * FC_SPLITKV_KEY_BLOCK,
        fc512_saturate(_mm512_mul_ps(_mm512_mul_ps(sums[s], scale), f)));
}

/* The AVX-512 split-KV kernel with these scores (registry row). */
flashcpu_status fc_decode_splitkv_fp8dot__avx512bf16(const fc_kernel_env *env,
                                                     const fc_problem *p,
                                                     fc_kernel_plan *plan) {
  return fc_splitkv_plan_avx512(env, p, plan, fp8_scores);
}
