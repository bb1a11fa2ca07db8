/* The scale of a Q8_0 block for the TUs built with F16C (AVX2, AVX-512). */
#ifndef FLASHCPU_SIMD_Q8_0_SCALE_F16C_H
#define FLASHCPU_SIMD_Q8_0_SCALE_F16C_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* A Q8_0 block's scale d by F16C: fc_q8_0_scale's value in one
 * instruction (the portable decode's branches cost more than the block's
 * codes); NaN comes out quiet, as any NaN does. */
static inline float fc_q8_0_scale_f16c(const char *block) {
  uint16_t half;
  memcpy(&half, block, sizeof half);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(half)));
}

#endif
