/* Scalar conversions between f32 and the 16-bit storage dtypes, with
 * round-to-nearest-even on the way down and NaN kept NaN. Portable C that
 * any translation unit may include; SIMD kernels use their own. */
#ifndef FLASHCPU_COMMON_DTYPE_CONVERT_H
#define FLASHCPU_COMMON_DTYPE_CONVERT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashcpu/flashcpu.h"

static inline uint32_t fc_f32_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static inline float fc_f32_from_bits(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static inline float fc_f16_to_f32(uint16_t half) {
  uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) /* inf or NaN */
    return fc_f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24, exact */
    float magnitude = (float)mantissa * 0x1p-24f;
    return fc_f32_from_bits(sign | fc_f32_bits(magnitude));
  }
  return fc_f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static inline uint16_t fc_f32_to_f16(float value) {
  uint32_t bits = fc_f32_bits(value);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;  /* NaN stays NaN */
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520: inf */
  if (magnitude < 0x38800000u) {
    /* Below 2^-14: f16 subnormal, value * 2^24 rounded to an integer (the
     * scaling is exact; nearbyintf rounds half to even). 0x400 is the
     * smallest normal, which is also the right encoding. */
    float scaled = fc_f32_from_bits(magnitude) * 0x1p24f;
    return sign | (uint16_t)nearbyintf(scaled);
  }
  uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return sign | (uint16_t)((rounded - 0x38000000u) >> 13);
}

static inline float fc_bf16_to_f32(uint16_t value) {
  return fc_f32_from_bits((uint32_t)value << 16);
}

static inline uint16_t fc_f32_to_bf16(float value) {
  const uint32_t bits = fc_f32_bits(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet = (bits >> 16) | 0x40u; /* NaN: kept quiet and NaN */
  /* A select, not a branch: row loops of it vectorize. */
  return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* Converts count elements of dtype at source to f32, multiplied by factor. */
static inline void fc_load_row_f32(const void *source, flashcpu_dtype dtype,
                                   int64_t count, float factor,
                                   float *destination) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    const float *from = (const float *)source;
    for (int64_t i = 0; i < count; i++) destination[i] = from[i] * factor;
  } else if (dtype == FLASHCPU_DTYPE_F16) {
    const uint16_t *from = (const uint16_t *)source;
    for (int64_t i = 0; i < count; i++)
      destination[i] = fc_f16_to_f32(from[i]) * factor;
  } else {
    const uint16_t *from = (const uint16_t *)source;
    for (int64_t i = 0; i < count; i++)
      destination[i] = fc_bf16_to_f32(from[i]) * factor;
  }
}

/* Stores count f32 values, each multiplied by factor, as dtype. */
static inline void fc_store_row(const float *source, float factor,
                                int64_t count, flashcpu_dtype dtype,
                                void *destination) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    float *to = (float *)destination;
    for (int64_t i = 0; i < count; i++) to[i] = source[i] * factor;
  } else if (dtype == FLASHCPU_DTYPE_F16) {
    uint16_t *to = (uint16_t *)destination;
    for (int64_t i = 0; i < count; i++)
      to[i] = fc_f32_to_f16(source[i] * factor);
  } else {
    uint16_t *to = (uint16_t *)destination;
    for (int64_t i = 0; i < count; i++)
      to[i] = fc_f32_to_bf16(source[i] * factor);
  }
}

#endif
