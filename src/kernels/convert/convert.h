/* Row converters: count elements of a storage dtype to f32, times a factor
 * (the pre-scale Q gets; 1 for K and V). One per dtype x ISA; every version
 * gives the same bits (the widening is exact, the multiply is one rounding). */
#ifndef FLASHCPU_KERNELS_CONVERT_CONVERT_H
#define FLASHCPU_KERNELS_CONVERT_CONVERT_H

#include <stdint.h>

#include "common/quant.h"
#include "flashcpu/flashcpu.h"

typedef void (*fc_row_to_f32_fn)(const void *source, int64_t count,
                                 float factor, float *destination);

#define FC_DECLARE_ROW_TO_F32(isa)                                             \
  void fc_f32_row_to_f32__##isa(const void *, int64_t, float, float *);        \
  void fc_f16_row_to_f32__##isa(const void *, int64_t, float, float *);        \
  void fc_bf16_row_to_f32__##isa(const void *, int64_t, float, float *);

/* A quantized row (I8, U8, F8_E4M3, F8_E5M2, Q8_0) dequantized to f32:
 * (code - zero) * scale, scales as fc_row_scales says; every version gives
 * fc_dequant_row_portable's bits. */
typedef void (*fc_dequant_row_fn)(flashcpu_dtype dtype, const char *row,
                                  int64_t count, const fc_row_scales *scales,
                                  float *destination);

FC_DECLARE_ROW_TO_F32(scalar)
#if defined(__x86_64__)
FC_DECLARE_ROW_TO_F32(avx2)
FC_DECLARE_ROW_TO_F32(avx512)
#endif
#if defined(__aarch64__)
FC_DECLARE_ROW_TO_F32(neon)
#endif

#endif
