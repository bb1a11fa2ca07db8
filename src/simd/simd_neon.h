/* NEON (AArch64) vocabulary for kernels: a vector exp2. Static inline,
 * included only from NEON translation units. */
#ifndef FLASHCPU_SIMD_SIMD_NEON_H
#define FLASHCPU_SIMD_SIMD_NEON_H

#include <arm_neon.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "simd/exp2_poly.h"

/* Lanes clamped to [-FLT_MAX, FLT_MAX]; FMIN/FMAX keep NaN. */
static inline float32x4_t fcn_saturate(float32x4_t x) {
  return vminq_f32(vmaxq_f32(x, vdupq_n_f32(-FLT_MAX)), vdupq_n_f32(FLT_MAX));
}

static inline float32x4_t fcn_pow2_int(float32x4_t n) {
  int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
  return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}

/* 2^x for every lane, to about 2 ulp (the polynomial of fc512_exp2); 2^n
 * applied in two halves so subnormal results round once. The clamp gives
 * exactly 0 from -150 down (-inf included); FMIN/FMAX and the arithmetic
 * after them keep NaN, so no blends. */
static inline float32x4_t fcn_exp2(float32x4_t x) {
  const float32x4_t clamped =
      vminq_f32(vmaxq_f32(x, vdupq_n_f32(-150.0f)), vdupq_n_f32(128.0f));
  const float32x4_t n = vrndnq_f32(clamped);
  const float32x4_t f = vsubq_f32(clamped, n);
  float32x4_t poly = vdupq_n_f32(FC_EXP2_C6);
  poly = vfmaq_f32(vdupq_n_f32(FC_EXP2_C5), poly, f);
  poly = vfmaq_f32(vdupq_n_f32(FC_EXP2_C4), poly, f);
  poly = vfmaq_f32(vdupq_n_f32(FC_EXP2_C3), poly, f);
  poly = vfmaq_f32(vdupq_n_f32(FC_EXP2_C2), poly, f);
  poly = vfmaq_f32(vdupq_n_f32(FC_EXP2_C1), poly, f);
  poly = vfmaq_f32(vdupq_n_f32(FC_EXP2_C0), poly, f);
  const float32x4_t half = vrndq_f32(vmulq_f32(n, vdupq_n_f32(0.5f)));
  return vmulq_f32(vmulq_f32(poly, fcn_pow2_int(half)),
                   fcn_pow2_int(vsubq_f32(n, half)));
}

#endif
