/* f32/f16/bf16 prefill for AVX-512: register blocks of 32 query slots (two
 * vectors); S micro-tile 12 keys x 32 slots and O micro-tile 12 columns x
 * 32 slots, 24 accumulators each out of 32 registers. (bf16 Q and K can take
 * the AVX512-BF16 variant instead, prefill_avx512bf16.c, on request.) */
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 12
#define PF_PV_COLUMNS 12
#define PF_NAME(what) fc_f32_prefill_##what##_12x32__avx512
#define PF_KERNEL fc_prefill_12x32__avx512
/* 768 slots per tile (fewer where a problem has few tiles,
 * prefill_tile_size.c): the K panels and V checks of each block are amortised
 * over 192 rows of a 4-head group; 7-10% faster than 192 slots at 1 thread
 * on an Intel Xeon (docs/performance.md). */
#ifndef FC_F32_TILE_SLOTS
#define FC_F32_TILE_SLOTS 768
#endif
#define PF_TILE_SLOTS FC_F32_TILE_SLOTS

#include "kernels/prefill/prefill_tile.inc"
