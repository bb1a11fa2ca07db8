/* Split-KV decode for NEON: the fcv_* micro-kernels
 * (decode_splitkv_vec.inc) with 4-lane vectors (1 key x 4 slots of dot
 * products reduce together) and 4 vectors of output columns x 4 slots in
 * registers (16 accumulators of 32 registers); rows are read where they
 * lie, 8 elements at a time. */
#include <stdint.h>

#include "flashcpu/flashcpu.h"
#include "simd/vec_lanes_neon.h"

/* Elements d .. d + 7 of a row as f32: f32 and f16 in order, bf16 even
 * elements in lo and odd ones in hi (a shift and an and, no shuffle). */
static inline __attribute__((always_inline)) void
ds_load_pair(const char *row, flashcpu_dtype dtype, int64_t d, fcv *lo,
             fcv *hi) {
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

#define DS_VALUE_VECTORS 4
#define DS_NAME(what) fc_splitkv_##what##__neon
#define DS_KERNEL fc_decode_splitkv__neon

#include "kernels/decode/decode_splitkv_vec.inc"
