/* f32/f16/bf16 prefill for AVX-512: register blocks of 32 query slots (two
 * vectors); S micro-tile 12 keys x 32 slots and O micro-tile 12 columns x
 * 32 slots, 24 accumulators each out of 32 registers. (bf16 Q and K can take
 * the AVX512-BF16 variant instead, prefill_bf16dot_12x32__avx512bf16.c, on
 * request.) */
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 12
#define PF_PV_COLUMNS 12
#define PF_NAME(what) fc_f32_prefill_##what##_12x32__avx512
#define PF_KERNEL fc_prefill_12x32__avx512
/* f32 V staged into column panels too, rather than read in place: rows a
 * whole K/V row apart (4 KiB for 8 heads of 128) share one L1 set, and a
 * column group's 96 rows evicted each other (prefill_vector_staging.inc). */
#define PF_STAGE_F32_V 1
/* Slots per tile: the row's (kernels.inc). */

#include "kernels/prefill/prefill_tile.inc"
