/* The public entry point: check, choose the kernel, plan, reserve,
 * launch. */
#include <stdio.h>
#include <string.h>

#include "api/check.h"
#include "api/context_internal.h"
#include "api/errors.h"
#include "dispatch/plan_execute.h"

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
  /* The reason is formatted only for the log or an error (a short call
   * would otherwise spend a few percent of its time in snprintf). */
  char reason[384] = "";
  const fc_attention_kernel *kernel = fc_kernel_table_choose(
      &ctx->table, &problem, reason, ctx->verbose ? sizeof reason : 0);
  if (!kernel && !ctx->verbose)
    fc_kernel_table_choose(&ctx->table, &problem, reason, sizeof reason);
  if (ctx->verbose)
    fprintf(stderr,
            "[flashcpu] attention B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld "
            "D=%lld: %s (%s), row loads %s\n",
            (long long)problem.batch, (long long)problem.q_len,
            (long long)problem.kv_capacity, (long long)problem.q_heads,
            (long long)problem.kv_heads, (long long)problem.head_dim,
            kernel ? kernel->name : "no kernel", reason,
            problem.k.quantized ? ctx->table.dequant_row_name
                                : ctx->table.row_to_f32_names[problem.k.dtype]);
  if (!kernel)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "flashcpu_attention: %s", reason);
  char kernel_reason[256];
  fc_kernel_env env =
      fc_context_kernel_env(ctx, kernel_reason, sizeof kernel_reason);
  fc_kernel_plan plan;
  fc_kernel_plan *plans[1] = {&plan};
  const fc_problem *problems[1] = {&problem};
  env.tile_slots = fc_kernel_tile_slots(kernel, env.settings);
  status = kernel->plan(&env, &problem, &plan);
  if (status == FLASHCPU_OK &&
      fc_plans_reserve(&ctx->runtime, plans, 1, true, kernel_reason,
                       sizeof kernel_reason) != 0)
    status = FLASHCPU_ERROR_OUT_OF_MEMORY;
  if (status == FLASHCPU_OK &&
      fc_plans_launch(&ctx->runtime, plans, problems, 1, NULL) != 0) {
    snprintf(kernel_reason, sizeof kernel_reason, "out of memory launching");
    status = FLASHCPU_ERROR_OUT_OF_MEMORY;
  }
  if (status != FLASHCPU_OK)
    return fc_fail(ctx, status, "flashcpu_attention: %s: %s", kernel->name,
                   kernel_reason[0] ? kernel_reason : "failed");
  const size_t name_length = strlen(kernel->name);
  const size_t kept = name_length < sizeof ctx->last_kernels
                          ? name_length
                          : sizeof ctx->last_kernels - 1;
  memcpy(ctx->last_kernels, kernel->name, kept); /* no format: a copy */
  ctx->last_kernels[kept] = '\0';
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
