/* Validates the arguments of flashcpu_attention and resolves defaults. */
#ifndef FLASHCPU_API_CHECK_H
#define FLASHCPU_API_CHECK_H

#include "common/problem.h"
#include "flashcpu/flashcpu.h"

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
