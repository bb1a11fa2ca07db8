/* Validates the arguments of flashcpu_attention and resolves defaults. */
#ifndef FLASHCPU_API_CHECK_H
#define FLASHCPU_API_CHECK_H

#include "api/view_check.h"
#include "common/problem.h"
#include "flashcpu/flashcpu.h"

/* *copy = *params with the fields an earlier struct_size lacks at their
 * defaults (params NULL: every default). INVALID_ARGUMENT for an unknown
 * struct_size. */
flashcpu_status fc_copy_params(flashcpu_context *ctx, const char *call,
                               const flashcpu_attention_params *params,
                               flashcpu_attention_params *copy);

/* An additive mask over dims [batch, heads, rows, keys]: data, strides,
 * and the bytes it spans. */
flashcpu_status fc_check_additive(flashcpu_context *ctx, const char *call,
                                  const flashcpu_additive_mask *mask,
                                  const int64_t dims[4], fc_byte_span *span);

/* OVERLAP with a message when out or lse overlaps one of the count inputs
 * (named by names) or each other. */
flashcpu_status fc_check_outputs_apart(flashcpu_context *ctx, const char *call,
                                       fc_byte_span out, fc_byte_span lse,
                                       const fc_byte_span *inputs,
                                       const char *const *names, int count);

/* The flags, scale, softcap and window of params. */
flashcpu_status fc_check_common_params(flashcpu_context *ctx, const char *call,
                                       const flashcpu_attention_params *params);

/* Checks the sinks, ALiBi slopes and query offsets of params
 * (slope_batches: rows of a [B, Hq] slope array, and query offsets), sets
 * them in *problem (whose q_heads is set), and
 * appends each one's bytes and name to spans and names, counting them in
 * *count, for the overlap checks. */
flashcpu_status fc_check_variants(flashcpu_context *ctx, const char *call,
                                  const flashcpu_attention_params *params,
                                  fc_problem *problem, int64_t slope_batches,
                                  fc_byte_span *spans, int *count,
                                  const char **names);

/* Fills *problem and returns FLASHCPU_OK, or records a message on ctx and
 * returns the error status. Reads the inputs' metadata only. */
flashcpu_status fc_check_attention(
    flashcpu_context *ctx, const flashcpu_tensor *q, const flashcpu_tensor *k,
    const flashcpu_tensor *v, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params, fc_problem *problem);

#endif
