/* f32/f16/bf16 prefill for NEON: register blocks of 16 query slots (four
 * vectors); S micro-tile 6 keys x 16 slots and O micro-tile 6 columns x 16
 * slots, 24 accumulators each out of 32 registers. */
#include "simd/vec_neon.h"

#define PF_SLOT_VECTORS 4
#define PF_QK_KEYS 6
#define PF_PV_COLUMNS 6
#define PF_NAME(what) fc_f32_prefill_##what##_6x16__neon
#define PF_KERNEL fc_prefill_6x16__neon

#include "kernels/prefill/prefill_tile.inc"
