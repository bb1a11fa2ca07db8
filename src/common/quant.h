/* The quantized K/V formats as the header defines them: fp8 codecs, the
 * Q8_0 block, scales, and rows to f32 and back. Portable C; the ISA
 * versions of the row dequantizer (kernels/convert) give the same bits:
 * every value is (code - zero) * scale in f32, one rounding. */
#ifndef FLASHCPU_COMMON_QUANT_H
#define FLASHCPU_COMMON_QUANT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype_convert.h"
#include "flashcpu/flashcpu.h"

enum { FC_Q8_0_BLOCK = 32, FC_Q8_0_BYTES = 34 };

static inline bool fc_dtype_is_float(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32 || dtype == FLASHCPU_DTYPE_F16 ||
         dtype == FLASHCPU_DTYPE_BF16;
}

static inline bool fc_dtype_is_quantized(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_I8 || dtype == FLASHCPU_DTYPE_U8 ||
         dtype == FLASHCPU_DTYPE_F8_E4M3 || dtype == FLASHCPU_DTYPE_F8_E5M2 ||
         dtype == FLASHCPU_DTYPE_Q8_0;
}

static inline float fc_e4m3_to_f32(uint8_t code) {
  const uint32_t sign = (uint32_t)(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu, mantissa = code & 7u;
  if (exponent == 15 && mantissa == 7)
    return fc_f32_from_bits(sign | 0x7fc00000u);
  if (exponent == 0) /* subnormal: mantissa * 2^-9, exact */
    return fc_f32_from_bits(sign | fc_f32_bits((float)mantissa * 0x1p-9f));
  return fc_f32_from_bits(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

static inline float fc_e5m2_to_f32(uint8_t code) {
  return fc_f16_to_f32((uint16_t)(code << 8));
}

/* Round to nearest even, finite values past the largest (448) saturated,
 * inf and NaN to NaN (E4M3 has no inf). */
static inline uint8_t fc_f32_to_e4m3(float value) {
  const uint32_t bits = fc_f32_bits(value), magnitude = bits & 0x7fffffffu;
  const uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
  if (magnitude >= 0x7f800000u) return sign | 0x7fu;
  if (magnitude < 0x3c800000u) /* below 2^-6: steps of 2^-9 (8 is 2^-6) */
    return sign | (uint8_t)nearbyintf(fc_f32_from_bits(magnitude) * 512.0f);
  const uint32_t rounded =
      (magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20;
  const uint32_t code = rounded - (120u << 3);
  return sign | (uint8_t)(code > 0x7eu ? 0x7eu : code);
}

/* Round to nearest even, finite values past the largest (57344)
 * saturated; inf and NaN kept. */
static inline uint8_t fc_f32_to_e5m2(float value) {
  const uint32_t bits = fc_f32_bits(value), magnitude = bits & 0x7fffffffu;
  const uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
  if (magnitude > 0x7f800000u) return sign | 0x7eu;
  if (magnitude == 0x7f800000u) return sign | 0x7cu;
  if (magnitude < 0x38800000u) /* below 2^-14: steps of 2^-16 */
    return sign | (uint8_t)nearbyintf(fc_f32_from_bits(magnitude) * 65536.0f);
  const uint32_t rounded =
      (magnitude + 0xfffffu + ((magnitude >> 21) & 1u)) >> 21;
  const uint32_t code = rounded - (112u << 2);
  return sign | (uint8_t)(code > 0x7bu ? 0x7bu : code);
}

/* One value of a scales view (f32, f16 or bf16). */
static inline float fc_scale_load(const char *data, flashcpu_dtype dtype,
                                  int64_t index) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    float value;
    memcpy(&value, data + index * 4, sizeof value);
    return value;
  }
  uint16_t half;
  memcpy(&half, data + index * 2, sizeof half);
  return dtype == FLASHCPU_DTYPE_F16 ? fc_f16_to_f32(half)
                                     : fc_bf16_to_f32(half);
}

static inline void fc_scale_store(char *data, flashcpu_dtype dtype,
                                  int64_t index, float value) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    memcpy(data + index * 4, &value, sizeof value);
    return;
  }
  const uint16_t half = dtype == FLASHCPU_DTYPE_F16 ? fc_f32_to_f16(value)
                                                    : fc_f32_to_bf16(value);
  memcpy(data + index * 2, &half, sizeof half);
}

/* Half a code step over the format's largest code, relative: how far a
 * stored scale may fall below the exact one before the row's largest
 * value saturates by more than its rounding to a code. */
static inline double fc_quant_scale_slack(flashcpu_dtype dtype) {
  switch (dtype) {
  case FLASHCPU_DTYPE_U8:
    return 0.5 / 255.0;
  case FLASHCPU_DTYPE_F8_E4M3:
    return 16.0 / 448.0; /* codes near 448: 32 apart */
  case FLASHCPU_DTYPE_F8_E5M2:
    return 4096.0 / 57344.0; /* 8192 apart */
  default:
    return 0.5 / 127.0; /* I8, Q8_0 */
  }
}

/* A scale computed from a row (exact: >= 0 or NaN) stored in dtype at data:
 * rounded to nearest, or to the next value up where the nearest is 0 or a
 * subnormal so far below exact that the row would lose its values (read
 * as zeros, or its largest codes saturated past slack). Returns the value
 * stored. */
static inline float fc_scale_store_computed(char *data, flashcpu_dtype dtype,
                                            double exact, double slack) {
  fc_scale_store(data, dtype, 0, (float)exact);
  const float stored = fc_scale_load(data, dtype, 0);
  const float smallest_normal =
      dtype == FLASHCPU_DTYPE_F16 ? 0x1p-14f : 0x1p-126f;
  if (!(stored < smallest_normal) || !(exact > stored * (1.0 + slack)))
    return stored;
  if (dtype == FLASHCPU_DTYPE_F32) {
    const float up = nextafterf(stored, INFINITY);
    memcpy(data, &up, sizeof up);
  } else { /* f16, bf16: the bits of a value >= 0 count up */
    uint16_t bits;
    memcpy(&bits, data, sizeof bits);
    bits++;
    memcpy(data, &bits, sizeof bits);
  }
  return fc_scale_load(data, dtype, 0);
}

/* The scales of one row: element d has scale scales[d * stride] and zero
 * zeros[d * stride] (in dtype); NULL scales: 1, NULL zeros: 0. */
typedef struct fc_row_scales {
  const char *scales, *zeros;
  flashcpu_dtype dtype;
  int64_t stride;
} fc_row_scales;

/* The scale and zero of a row whose scales do not vary along it (stride
 * 0): false when they do, and the row takes fc_dequant_row_portable. */
static inline bool fc_row_scales_uniform(const fc_row_scales *scales,
                                         float *scale, float *zero) {
  if (scales->stride != 0 && (scales->scales || scales->zeros)) return false;
  *scale =
      scales->scales ? fc_scale_load(scales->scales, scales->dtype, 0) : 1.0f;
  *zero = scales->zeros ? fc_scale_load(scales->zeros, scales->dtype, 0) : 0.0f;
  return true;
}

/* A Q8_0 block's scale d. */
static inline float fc_q8_0_scale(const char *block) {
  uint16_t half;
  memcpy(&half, block, sizeof half);
  return fc_f16_to_f32(half);
}

/* Element d of a quantized row as its code in f32 (Q8_0: d * code). */
static inline float fc_quant_code(flashcpu_dtype dtype, const char *row,
                                  int64_t d) {
  const uint8_t byte = (uint8_t)row[d];
  switch (dtype) {
  case FLASHCPU_DTYPE_I8:
    return (float)(int8_t)byte;
  case FLASHCPU_DTYPE_U8:
    return (float)byte;
  case FLASHCPU_DTYPE_F8_E4M3:
    return fc_e4m3_to_f32(byte);
  case FLASHCPU_DTYPE_F8_E5M2:
    return fc_e5m2_to_f32(byte);
  default: {
    const char *block = row + d / FC_Q8_0_BLOCK * FC_Q8_0_BYTES;
    return fc_q8_0_scale(block) * (float)(int8_t)block[2 + d % FC_Q8_0_BLOCK];
  }
  }
}

/* count elements of a quantized row as f32: (code - zero) * scale. */
static inline void fc_dequant_row_portable(flashcpu_dtype dtype,
                                           const char *row, int64_t count,
                                           const fc_row_scales *scales,
                                           float *out) {
  for (int64_t d = 0; d < count; d++) {
    float value = fc_quant_code(dtype, row, d);
    if (scales->zeros)
      value -= fc_scale_load(scales->zeros, scales->dtype, d * scales->stride);
    if (scales->scales)
      value *= fc_scale_load(scales->scales, scales->dtype, d * scales->stride);
    out[d] = value;
  }
}

/* x rounded to the nearest integer (even on ties) within [low, high]. */
static inline int64_t fc_quant_clamp(float x, float low, float high) {
  if (!(x >= low)) return (int64_t)low; /* NaN cannot reach here */
  if (x > high) return (int64_t)high;
  return (int64_t)nearbyintf(x);
}

/* Codes of value x for (scale, zero): what flashcpu_quantize writes. */
static inline uint8_t fc_quant_encode(flashcpu_dtype dtype, float x,
                                      float scale, float zero) {
  switch (dtype) {
  case FLASHCPU_DTYPE_I8:
    return (uint8_t)(int8_t)fc_quant_clamp(x / scale, -127.0f, 127.0f);
  case FLASHCPU_DTYPE_U8:
    return (uint8_t)fc_quant_clamp(x / scale + zero, 0.0f, 255.0f);
  case FLASHCPU_DTYPE_F8_E4M3:
    return fc_f32_to_e4m3(x / scale);
  default:
    return fc_f32_to_e5m2(x / scale);
  }
}

/* A Q8_0 block from 32 floats: d = max|x| / 127 stored as f16 (as
 * fc_scale_store_computed stores it), codes x / d rounded; NaN or inf in
 * the block: d NaN, codes 0. */
static inline void fc_q8_0_encode_block(const float *x, char *block) {
  float largest = 0.0f;
  bool finite = true;
  for (int i = 0; i < FC_Q8_0_BLOCK; i++) {
    if (!isfinite(x[i]))
      finite = false;
    else if (fabsf(x[i]) > largest)
      largest = fabsf(x[i]);
  }
  const float d = fc_scale_store_computed(
      block, FLASHCPU_DTYPE_F16, finite ? (double)largest / 127.0 : NAN,
      fc_quant_scale_slack(FLASHCPU_DTYPE_Q8_0));
  for (int i = 0; i < FC_Q8_0_BLOCK; i++)
    block[2 + i] =
        (char)(int8_t)(finite && d > 0.0f
                           ? fc_quant_clamp(x[i] / d, -127.0f, 127.0f)
                           : 0);
}

#endif
