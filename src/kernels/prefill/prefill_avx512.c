/* f32/f16/bf16 prefill for AVX-512: register blocks of 32 query slots (two
 * vectors); S micro-tile 8 keys x 32 slots and O micro-tile 8 columns x 32
 * slots, 16 accumulators each out of 32 registers. */
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 8
#define PF_PV_COLUMNS 8
#define PF_NAME(what) fc_f32_prefill_##what##_8x32__avx512
#define PF_KERNEL fc_attention_prefill__avx512

#include "kernels/prefill/prefill_tiled.inc"
