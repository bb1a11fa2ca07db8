/* Split-KV decode for NEON: the fcv_* micro-kernels
 * (decode_splitkv_vec.inc) with 4-lane vectors (1 key x 4 slots of dot
 * products reduce together) and 4 vectors of output columns x 4 slots in
 * registers (16 accumulators of 32 registers); rows are read where they
 * lie, 8 elements at a time, quantized ones dequantized in registers. */
#include <stdint.h>

#include "common/quant.h"
#include "flashcpu/flashcpu.h"
#include "simd/vec_lanes_neon.h"

/* 8 codes of a quantized row from d as f32 (Q8_0: times its block's d),
 * the portable decoder's bits (common/quant.h). */
static inline __attribute__((always_inline)) void
quantized_codes(const char *row, flashcpu_dtype dtype, int64_t d, fcv *lo,
                fcv *hi) {
  if (dtype == FLASHCPU_DTYPE_I8 || dtype == FLASHCPU_DTYPE_Q8_0) {
    const char *at = row + d;
    float block_scale = 1.0f;
    if (dtype == FLASHCPU_DTYPE_Q8_0) {
      const char *block = row + d / FC_Q8_0_BLOCK * FC_Q8_0_BYTES;
      at = block + 2 + d % FC_Q8_0_BLOCK;
      block_scale = fc_q8_0_scale(block);
    }
    const int16x8_t wide = vmovl_s8(vld1_s8((const int8_t *)at));
    *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
    *hi = vcvtq_f32_s32(vmovl_high_s16(wide));
    if (dtype == FLASHCPU_DTYPE_Q8_0) {
      *lo = vmulq_n_f32(*lo, block_scale);
      *hi = vmulq_n_f32(*hi, block_scale);
    }
    return;
  }
  const uint16x8_t wide = vmovl_u8(vld1_u8((const uint8_t *)row + d));
  if (dtype == FLASHCPU_DTYPE_U8) {
    *lo = vcvtq_f32_u32(vmovl_u16(vget_low_u16(wide)));
    *hi = vcvtq_f32_u32(vmovl_high_u16(wide));
    return;
  }
  if (dtype == FLASHCPU_DTYPE_F8_E5M2) { /* an f16's upper byte */
    const float16x8_t half = vreinterpretq_f16_u16(vshlq_n_u16(wide, 8));
    *lo = vcvt_f32_f16(vget_low_f16(half));
    *hi = vcvt_high_f32_f16(half);
    return;
  }
  /* E4M3 as an f16 of value * 2^-8 (exact), times 2^8; 0x7f is NaN */
  const uint16x8_t magnitude = vandq_u16(wide, vdupq_n_u16(0x7f));
  const uint16x8_t bits =
      vorrq_u16(vshlq_n_u16(vandq_u16(wide, vdupq_n_u16(0x80)), 8),
                vshlq_n_u16(magnitude, 7));
  const float16x8_t half = vreinterpretq_f16_u16(bits);
  /* signed, so that widening the mask keeps every bit of a lane set */
  const int16x8_t nan =
      vreinterpretq_s16_u16(vceqq_u16(magnitude, vdupq_n_u16(0x7f)));
  fcv *out[2] = {lo, hi};
  for (int i = 0; i < 2; i++) {
    const float32x4_t value = vmulq_n_f32(
        i ? vcvt_high_f32_f16(half) : vcvt_f32_f16(vget_low_f16(half)), 256.0f);
    const uint32x4_t is_nan = vreinterpretq_u32_s32(
        i ? vmovl_high_s16(nan) : vmovl_s16(vget_low_s16(nan)));
    const uint32x4_t quiet = vorrq_u32(
        vandq_u32(vreinterpretq_u32_f32(value), vdupq_n_u32(0x80000000u)),
        vdupq_n_u32(0x7fc00000u));
    *out[i] = vbslq_f32(is_nan, vreinterpretq_f32_u32(quiet), value);
  }
}

/* Elements d .. d + 7 of a row as f32: f32, f16 and quantized rows in
 * order ((code - zero) * scale, the staged rows' bits: zero and scale are 0
 * and 1 where the view has none), bf16 even elements in lo and odd ones in
 * hi (a shift and an and, no shuffle). */
static inline __attribute__((always_inline)) void
ds_load_pair(const char *row, flashcpu_dtype dtype, int64_t d, float scale,
             float zero, fcv *lo, fcv *hi) {
  if (fc_dtype_is_quantized(dtype)) {
    quantized_codes(row, dtype, d, lo, hi);
    if (dtype == FLASHCPU_DTYPE_U8) {
      *lo = vsubq_f32(*lo, vdupq_n_f32(zero));
      *hi = vsubq_f32(*hi, vdupq_n_f32(zero));
    }
    if (dtype != FLASHCPU_DTYPE_Q8_0) {
      *lo = vmulq_n_f32(*lo, scale);
      *hi = vmulq_n_f32(*hi, scale);
    }
    return;
  }
  if (dtype == FLASHCPU_DTYPE_BF16) {
    const uint32x4_t raw =
        vreinterpretq_u32_u16(vld1q_u16((const uint16_t *)row + d));
    *lo = vreinterpretq_f32_u32(vshlq_n_u32(raw, 16));
    *hi = vreinterpretq_f32_u32(vandq_u32(raw, vdupq_n_u32(0xffff0000u)));
  } else if (dtype == FLASHCPU_DTYPE_F16) {
    const float16x8_t half =
        vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)row + d));
    *lo = vcvt_f32_f16(vget_low_f16(half));
    *hi = vcvt_high_f32_f16(half);
  } else {
    *lo = vld1q_f32((const float *)row + d);
    *hi = vld1q_f32((const float *)row + d + 4);
  }
}

/* Elements d .. d + 7 of an E4M3 row holding no NaN code, as
 * ds_load_pair's bits: the sign-extended codes shifted to f16s of value *
 * 2^-8 with bit 14 cleared, times folded = scale * 2^8. */
static inline __attribute__((always_inline)) void
ds_load_e4m3_finite(const char *row, int64_t d, float folded, fcv *lo,
                    fcv *hi) {
  const int16x8_t wide = vmovl_s8(vld1_s8((const int8_t *)row + d));
  const float16x8_t half = vreinterpretq_f16_u16(vandq_u16(
      vreinterpretq_u16_s16(vshlq_n_s16(wide, 7)), vdupq_n_u16(0xbf80)));
  *lo = vmulq_n_f32(vcvt_f32_f16(vget_low_f16(half)), folded);
  *hi = vmulq_n_f32(vcvt_high_f32_f16(half), folded);
}

/* Whether none of n rows' first dim E4M3 codes (dim a multiple of 8) is a
 * NaN code (0x7f or 0xff). */
static inline int ds_e4m3_rows_finite(const char *const *rows, int64_t n,
                                      int64_t dim) {
  uint8x16_t nan = vdupq_n_u8(0);
  for (int64_t j = 0; j < n; j++) {
    const uint8_t *row = (const uint8_t *)rows[j];
    int64_t d = 0;
    for (; d + 16 <= dim; d += 16)
      nan =
          vorrq_u8(nan, vceqq_u8(vorrq_u8(vld1q_u8(row + d), vdupq_n_u8(0x80)),
                                 vdupq_n_u8(0xff)));
    if (d < dim)
      nan = vorrq_u8(
          nan, vcombine_u8(vceq_u8(vorr_u8(vld1_u8(row + d), vdup_n_u8(0x80)),
                                   vdup_n_u8(0xff)),
                           vdup_n_u8(0)));
  }
  return vmaxvq_u8(nan) == 0;
}

#define DS_VALUE_VECTORS 4
#define DS_VEC_READS_QUANTIZED 1
#define DS_NAME(what) fc_splitkv_##what##__neon
#define DS_KERNEL fc_decode_splitkv__neon

#include "kernels/decode/decode_splitkv_vec.inc"
