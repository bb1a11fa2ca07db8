/* f32/f16/bf16 prefill for AVX2 + FMA: register blocks of 16 query slots
 * (two vectors); S micro-tile 6 keys x 16 slots and O micro-tile 6 columns
 * x 16 slots, 12 accumulators each out of 16 registers. */
#include "simd/vec_avx2.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 6
#define PF_PV_COLUMNS 6
#define PF_NAME(what) fc_f32_prefill_##what##_6x16__avx2
#define PF_KERNEL fc_prefill_6x16__avx2

#include "kernels/prefill/prefill_tile.inc"
