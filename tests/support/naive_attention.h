// The naive float32 attention of VERIFY.md's tolerance rule: each row's
// scores materialised in float, softmax the textbook way (max, exp, sum),
// on the inputs as stored. Its distance from the float64 oracle measures
// how much error plain float32 arithmetic makes on a case (err_base). Its
// mask logic is written independently of the oracle's.
//
// Several formulations, all naive and all plain float32, that differ only
// in the order of their roundings:
//  - textbook: s = (q . k) * scale, then softcap, ALiBi's -slope * |p - j|,
//    mask, exp(s - max), with the sink logit as one more score of a zero
//    value row;
//  - log2 domain, FlashAttention's: the scale (and log2(e) when there is no
//    softcap, ALiBi or additive mask) folded into q before the dot product,
//    the sink times log2(e), exp2(s - max), lse = (max + log2(sum)) * ln(2);
//  - dot products summed in order, or in 8 or 16 interleaved partial sums
//    as SIMD code does.
// At scores near 300 the output is sensitive to the last bits of the
// scores, and two legitimate rounding orders can differ by several times
// one of them; err_base, the largest error over the formulations, measures
// what float32 arithmetic allows rather than what one order happens to do.
#ifndef FLASHCPU_TESTS_NAIVE_ATTENTION_H
#define FLASHCPU_TESTS_NAIVE_ATTENTION_H

#include <cstdint>

#include "flashcpu/flashcpu.h"

namespace fctest {

struct NaiveFormulation {
  bool log2_domain = false;
  int dot_lanes = 1; // partial sums in the dot product
  // P rounded to bf16 (to nearest even) where it multiplies V, its sum kept
  // in float32: what the AMX and bf16 dot-product kernels compute.
  bool weights_bf16 = false;
};
// The formulations the tolerance rule takes err_base over, for kernels that
// keep P in float32 and for those that round it to bf16 (VERIFY.md: a
// kernel that rounds P is compared with naive code that rounds it too).
extern const NaiveFormulation kNaiveFormulations[7];
extern const NaiveFormulation kNaiveFormulationsBf16Weights[7];
// One of the two sets.
inline const NaiveFormulation *NaiveFormulationsFor(bool weights_bf16) {
  return weights_bf16 ? kNaiveFormulationsBf16Weights : kNaiveFormulations;
}

// Every row of (batch b, query head h): out gets q.dims[1] rows of
// v.dims[3] floats (row-major), lse q.dims[1] natural-log values. A row that
// sees no key gets zeros and -inf.
void NaiveAttentionHeadF32(const flashcpu_tensor &q, const flashcpu_tensor &k,
                           const flashcpu_tensor &v,
                           const flashcpu_attention_params &params, int64_t b,
                           int64_t h, const NaiveFormulation &formulation,
                           float *out, float *lse);

} // namespace fctest

#endif // FLASHCPU_TESTS_NAIVE_ATTENTION_H
