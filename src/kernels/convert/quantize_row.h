/* f32 rows to quantized K/V (flashcpu_quantize, flashcpu_kv_append), as
 * the header's "quantized K/V" defines it. Portable C (baseline TU). */
#ifndef FLASHCPU_KERNELS_CONVERT_QUANTIZE_ROW_H
#define FLASHCPU_KERNELS_CONVERT_QUANTIZE_ROW_H

#include <stdbool.h>
#include <stdint.h>

#include "common/quant.h"
#include "flashcpu/flashcpu.h"

/* Where a row's scales go: as fc_row_scales, writable. computed: the
 * scales vary by token (one per row, written here); else they are read. */
typedef struct fc_row_scales_out {
  char *scales, *zeros; /* NULL: scale 1, zero 0 */
  flashcpu_dtype dtype;
  int64_t stride; /* channel stride (0 unless per channel) */
  bool computed;
} fc_row_scales_out;

/* Whether a view's scales are computed per row: they vary by token and
 * not by channel. Q8_0's block scales always are. */
static inline bool fc_scales_computed(const flashcpu_kv_scales *scales) {
  return scales && scales->strides[1] != 0 && scales->strides[3] == 0;
}

/* The first element of x[0..count) that read scales cannot encode (a
 * scale not finite or <= 0, or NaN / inf in an I8 or U8 row), with a
 * reason; -1 when every element can be written. */
int64_t fc_quantize_row_refusal(flashcpu_dtype dtype, const float *x,
                                int64_t count, const fc_row_scales_out *scales,
                                const char **why);

/* Writes count values (Q8_0: whole blocks) into row, computing and
 * storing the row's scale (and zero point) where scales->computed. */
void fc_quantize_row(flashcpu_dtype dtype, const float *x, int64_t count,
                     const fc_row_scales_out *scales, char *row);

#endif
