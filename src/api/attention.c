/* The public entry point: check, then run a kernel. */
#include "api/check.h"
#include "api/context_internal.h"
#include "api/errors.h"
#include "ref/ref_attention.h"

flashcpu_status flashcpu_attention(flashcpu_context *ctx,
                                   const flashcpu_tensor *q,
                                   const flashcpu_tensor *k,
                                   const flashcpu_tensor *v,
                                   const flashcpu_tensor *out, float *lse,
                                   const flashcpu_attention_params *params) {
  fc_problem problem;
  flashcpu_status status =
      fc_check_attention(ctx, q, k, v, out, lse, params, &problem);
  if (status != FLASHCPU_OK) return status;
  status = fc_ref_attention(ctx, &problem, ctx->num_threads);
  if (status == FLASHCPU_OK) fc_clear_error(ctx);
  return status;
}
