/* The public entry point: check, pick the kernel, run it on the teams. */
#include <stdio.h>

#include "api/check.h"
#include "api/context_internal.h"
#include "api/errors.h"

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
  const fc_team_plan *plan = &ctx->runtime.plan;
  int smallest_team = plan->teams[0].size;
  for (int t = 1; t < plan->team_count; t++)
    if (plan->teams[t].size < smallest_team) smallest_team = plan->teams[t].size;
  const char *name;
  char reason[160];
  fc_attention_fn kernel = fc_kernel_table_choose(
      &ctx->table, &problem, smallest_team, &name, reason, sizeof reason);
  if (ctx->verbose)
    fprintf(stderr,
            "[flashcpu] attention B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld "
            "D=%lld: %s (%s), row loads %s\n",
            (long long)problem.batch, (long long)problem.q_len,
            (long long)problem.kv_capacity, (long long)problem.q_heads,
            (long long)problem.kv_heads, (long long)problem.head_dim, name,
            reason, ctx->table.row_to_f32_names[problem.k.dtype]);
  status = kernel(ctx, &ctx->runtime, &ctx->table, &problem);
  if (status == FLASHCPU_OK) fc_clear_error(ctx);
  return status;
}
