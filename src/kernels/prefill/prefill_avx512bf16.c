/* bf16 Q and K prefill for AVX-512 with AVX512-BF16: S = Q K^T by VDPBF16PS
 * on bf16 pairs (K read in place), then the f32 softmax and O += P V of the
 * AVX-512 kernel (V converted to f32: P stays f32 for accuracy). The kernel
 * table picks it for bf16 Q and K with an even head_dim, on request. */
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 12
#define PF_PV_COLUMNS 12
#define PF_BF16_DOT 1
#define PF_NAME(what) fc_bf16_prefill_##what##_12x32__avx512bf16
#define PF_KERNEL fc_prefill_bf16dot_12x32__avx512bf16

#include "kernels/prefill/prefill_tile.inc"
