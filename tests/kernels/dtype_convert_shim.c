/* Exposes the library's internal scalar conversions (static inline C in
 * src/common/dtype_convert.h) to the C++ test, compiled as the C they are. */
#include <stdint.h>

#include "common/dtype_convert.h"

float fctest_f16_to_f32(uint16_t half) { return fc_f16_to_f32(half); }
uint16_t fctest_f32_to_f16(float value) { return fc_f32_to_f16(value); }
float fctest_bf16_to_f32(uint16_t value) { return fc_bf16_to_f32(value); }
uint16_t fctest_f32_to_bf16(float value) { return fc_f32_to_bf16(value); }
