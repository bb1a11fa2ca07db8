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

/* The flags, scale, softcap and window of params. */
flashcpu_status fc_check_common_params(flashcpu_context *ctx, const char *call,
                                       const flashcpu_attention_params *params);

/* Checks the sinks and ALiBi slopes of params (slope_batches: rows of a
 * [B, Hq] slope array), sets them in *problem (whose q_heads is set), and
 * appends each one's bytes and name to spans and names, counting them in
 * *count, for the overlap checks. */
flashcpu_status fc_check_variants(flashcpu_context *ctx, const char *call,
                                  const flashcpu_attention_params *params,
                                  fc_problem *problem, int64_t slope_batches,
                                  fc_byte_span *spans, int *count,
                                  const char **names);

/* Fills *problem and returns FLASHCPU_OK, or records a message on ctx and
 * returns the error status. Reads the inputs' metadata only. */
flashcpu_status fc_check_attention(flashcpu_context *ctx,
                                   const flashcpu_tensor *q,
                                   const flashcpu_tensor *k,
                                   const flashcpu_tensor *v,
                                   const flashcpu_tensor *out, float *lse,
                                   const flashcpu_attention_params *params,
                                   fc_problem *problem);

#endif
