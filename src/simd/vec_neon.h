/* The lane-generic vector vocabulary (fcv_*) on NEON: 4 f32 lanes. See
 * vec_avx512.h. */
#ifndef FLASHCPU_SIMD_VEC_NEON_H
#define FLASHCPU_SIMD_VEC_NEON_H

#include "simd/simd_neon.h"

#define FCV_LANES 4
typedef float32x4_t fcv;

static inline fcv fcv_zero(void) { return vdupq_n_f32(0.0f); }
static inline fcv fcv_set1(float x) { return vdupq_n_f32(x); }
static inline fcv fcv_load(const float *p) { return vld1q_f32(p); }
static inline void fcv_store(float *p, fcv v) { vst1q_f32(p, v); }
static inline fcv fcv_fma(fcv a, fcv b, fcv c) { return vfmaq_f32(c, a, b); }
static inline fcv fcv_mul(fcv a, fcv b) { return vmulq_f32(a, b); }
static inline fcv fcv_add(fcv a, fcv b) { return vaddq_f32(a, b); }
static inline fcv fcv_sub(fcv a, fcv b) { return vsubq_f32(a, b); }
static inline fcv fcv_exp2(fcv x) { return fcn_exp2(x); }
static inline fcv fcv_saturate(fcv x) { return fcn_saturate(x); }
/* FMAX already returns NaN when either side is NaN. */
static inline fcv fcv_max_nan(fcv a, fcv b) { return vmaxq_f32(a, b); }

static inline fcv fcv_replace_eq(fcv v, float match, float replacement) {
  return vbslq_f32(vceqq_f32(v, vdupq_n_f32(match)), vdupq_n_f32(replacement),
                   v);
}

static inline fcv fcv_hide_outside(fcv v, fcv key, fcv begin, fcv end) {
  uint32x4_t outside = vorrq_u32(vcltq_f32(key, begin), vcgeq_f32(key, end));
  return vbslq_f32(outside, vdupq_n_f32(-INFINITY), v);
}

static inline fcv fcv_keep_where_hidden(fcv score, fcv old, fcv updated) {
  return vbslq_f32(vceqq_f32(score, vdupq_n_f32(-INFINITY)), old, updated);
}

static inline fcv fcv_gather(const float *base, const int32_t *offsets) {
  float lanes[4] = {base[offsets[0]], base[offsets[1]], base[offsets[2]],
                    base[offsets[3]]};
  return vld1q_f32(lanes);
}

#endif
