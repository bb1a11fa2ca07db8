/* bf16 prefill on AMX tiles (TDPBF16PS): register blocks of 32 query slots,
 * S^T and O^T += V^T P^T on 2 x 2 accumulator tiles per 32 keys or 32
 * output columns (prefill_amx_units.inc), P rounded to bf16, the masks and
 * the online softmax in AVX-512 issued between the next register block's
 * S^T tile steps (prefill_amx_pipeline.inc). K and V^T are staged as whole
 * 1 KiB tiles, once per KV block for the whole team. The hooks of the
 * shared tile loop: prefill_amx_hooks.inc. */
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 32
/* 192 keys per KV block: P V's accumulator tiles are loaded and stored half
 * as often per product as with 96 (5-10% faster on an Intel Xeon; 64 was
 * slower, docs/performance.md). */
#ifndef FC_AMX_KV_BLOCK /* a build may set another multiple of 32 */
#define FC_AMX_KV_BLOCK 192
#endif
#define PF_KV_BLOCK_KEYS FC_AMX_KV_BLOCK
/* Keys whose weights are computed beside each S^T tile step (four
 * products, about 64 cycles): 4 keys are some 90 vector instructions, what
 * the one vector port free beside the tiles issues meanwhile (8 stalled the
 * tiles: 6% slower at one thread and 5-10% at 16 on an Intel Xeon). */
#ifndef FC_AMX_WEIGH_KEYS /* a build may set another even count */
#define FC_AMX_WEIGH_KEYS 4
#endif
#define PF_WEIGH_KEYS FC_AMX_WEIGH_KEYS
/* Slots per tile: the row's (kernels.inc). */
#define PF_DIM_ALIGN 32       /* a tile row holds 32 bf16 */
#define PF_P_PAIRS 1          /* Q^T and P V on bf16 pairs */
#define PF_OVERLAPPED_STEPS 1 /* prefill_amx_pipeline.inc */
#define PF_NAME(what) fc_bf16_prefill_##what##_32x32__amxbf16
#define PF_KERNEL fc_prefill_amx_32x32__amxbf16

#include "kernels/prefill/prefill_tile_base.inc"
#include "kernels/prefill/prefill_amx_hooks.inc"
#include "kernels/prefill/prefill_tile_loop.inc"
