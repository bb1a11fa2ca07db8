/* The float64 oracle: attention exactly as include/flashcpu/flashcpu.h
 * documents it, one output row at a time, in double precision. It reads the
 * same tensor views as the library (stored values converted exactly to
 * double), materialises the row's scores, and shares no code with the
 * library. Used by the tests and by `flashcpu run` to check sampled rows. */
#ifndef FLASHCPU_TESTS_ORACLE_H
#define FLASHCPU_TESTS_ORACLE_H

#include <stdint.h>

#include "flashcpu/flashcpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Computes output row (batch b, query head h, query row i): out_row gets
 * v->dims[3] doubles, *lse the natural-log log-sum-exp (-INFINITY and a zero
 * row when the row sees no key). params may be NULL (the defaults). The
 * arguments must be valid (the oracle does not check them).
 *
 * Every option is read as the header documents it, fields added after
 * 0.2.0 only when params->struct_size covers them:
 *  - sinks: sinks[h] (read in sinks_dtype) joins the row's softmax as one
 *    more score of a zero value row, in the maximum and the sum only; a row
 *    that sees no key gets zeros and lse = sinks[h]; a NaN sink is NaN in
 *    every row of its head;
 *  - ALiBi: -alibi_slopes[b * alibi_batch_stride + h] * |p - j|, with
 *    p = i + S_b - L, added after the softcap, like the additive mask.
 * Scores are doubles: the library's saturation of scores beyond
 * +-FLT_MAX * ln 2 is not modelled (tests of it check their own way). */
void flashcpu_oracle_row(const flashcpu_tensor *q, const flashcpu_tensor *k,
                         const flashcpu_tensor *v,
                         const flashcpu_attention_params *params, int64_t b,
                         int64_t h, int64_t i, double *out_row, double *lse);

/* Every row of (batch b, query head h) at once: out gets q->dims[1] rows
 * of v->dims[3] doubles (row-major), lse q->dims[1] values. The same
 * numbers as flashcpu_oracle_row, converting K and V to double only once.
 * Returns 0, or -1 when it cannot allocate its workspace. */
int flashcpu_oracle_head(const flashcpu_tensor *q, const flashcpu_tensor *k,
                         const flashcpu_tensor *v,
                         const flashcpu_attention_params *params, int64_t b,
                         int64_t h, double *out, double *lse);

/* An element of a view as double (f16/bf16 widened exactly; a quantized
 * one as its code, Q8_0 times its block's scale). */
double flashcpu_oracle_load(const flashcpu_tensor *t, int64_t b, int64_t s,
                            int64_t h, int64_t d);

/* An element of a quantized K or V (I8, U8, F8_E4M3, F8_E5M2, Q8_0) as the
 * header defines its value: (code - zero) * scale in f32, scales NULL
 * meaning 1. The oracle reads K and V this way where params has scales.
 * Decoded here from the formats' definitions, sharing no library code. */
double flashcpu_oracle_load_quantized(const flashcpu_tensor *t,
                                      const flashcpu_kv_scales *scales,
                                      int64_t b, int64_t s, int64_t h,
                                      int64_t d);

#ifdef __cplusplus
}
#endif

#endif
