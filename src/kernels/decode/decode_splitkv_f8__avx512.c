/* Split-KV decode of F8_E4M3 and F8_E5M2 caches on AVX-512: the f32
 * kernel's loops (decode_splitkv__avx512.c) with each F8 row read before
 * its scale, which then multiplies the key's dot products and weights
 * (16 keys at a time) instead of every element. E4M3 codes widen through
 * f16 as their values times 2^-8, 32 at a time (a widening, a shift and
 * an and, then two conversions), E5M2 codes exactly (an f16's upper
 * byte), where dequantizing 16 codes took a multiplication more and a
 * second widening: on an Intel Xeon the conversions, not the bytes, bound
 * an F8 decode. The sums round in another order than the dequantized
 * cache's, within f32 rounding of it. */
#include "kernels/decode/decode_splitkv.h"
#include "kernels/registry.h"

flashcpu_status fc_decode_splitkv_f8__avx512(const fc_kernel_env *env,
                                             const fc_problem *p,
                                             fc_kernel_plan *plan) {
  return fc_splitkv_plan_avx512_f8(env, p, plan);
}
