/* bf16 prefill for AVX-512 with AVX512-BF16: S = Q K^T and O += P V by
 * VDPBF16PS on bf16 pairs (K staged as pair panels, V as key pairs, P
 * rounded to bf16 pairs once per block), the softmax in f32 between them.
 * For bf16 Q, K and V with an even head_dim, on CPUs without AMX. */
#include "simd/vec_avx512.h"

#define PF_SLOT_VECTORS 2
#define PF_QK_KEYS 12
#define PF_PV_COLUMNS 12
#define PF_BF16_DOT 1
#define PF_NAME(what) fc_bf16_prefill_##what##_12x32__avx512bf16
#define PF_KERNEL fc_prefill_bf16dot_12x32__avx512bf16

#include "kernels/prefill/prefill_tile.inc"
