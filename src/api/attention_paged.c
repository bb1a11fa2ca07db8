/* flashcpu_attention_paged: check one layer's call against its plan, then
 * run each kernel family's requests as one problem over the pages. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/check.h"
#include "api/context_internal.h"
#include "api/errors.h"
#include "api/paged_check.h"
#include "api/plan_internal.h"
#include "kernels/kernel_support.h"

#define CALL "flashcpu_attention_paged"

/* q or out: [1, T, Hq, dim] of the plan. */
static flashcpu_status check_rows(flashcpu_context *ctx,
                                  const flashcpu_plan *plan,
                                  const flashcpu_tensor *t, const char *name,
                                  int64_t dim, fc_byte_span *span) {
  flashcpu_status status = fc_check_tensor(ctx, CALL, t, name, 0, span);
  if (status != FLASHCPU_OK) return status;
  const int64_t expected[4] = {1, plan->tokens, plan->q_heads, dim};
  static const char *const what[4] = {"batch (packed rows are [1, T, Hq, D])",
                                      "seq (the plan's T)",
                                      "heads (the plan's q_heads)", "head_dim"};
  for (int d = 0; d < 4; d++)
    if (t->dims[d] != expected[d])
      return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                     CALL ": %s->dims[%d] is %lld; the plan needs %lld, its %s",
                     name, d, (long long)t->dims[d], (long long)expected[d],
                     what[d]);
  return FLASHCPU_OK;
}

static flashcpu_status check_cache(flashcpu_context *ctx,
                                   const flashcpu_plan *plan,
                                   const flashcpu_paged_kv *kv,
                                   fc_byte_span *k_span, fc_byte_span *v_span,
                                   fc_byte_span *scale_spans) {
  flashcpu_status status =
      fc_check_paged_kv(ctx, CALL, kv, true, k_span, v_span, scale_spans);
  if (status != FLASHCPU_OK) return status;
  const struct {
    int64_t got, planned;
    const char *name;
  } geometry[] = {{kv->num_pages, plan->num_pages, "num_pages"},
                  {kv->page_size, plan->page_size, "page_size"},
                  {kv->kv_heads, plan->kv_heads, "kv_heads"},
                  {kv->head_dim, plan->head_dim, "head_dim"},
                  {kv->v_head_dim, plan->v_head_dim, "v_head_dim"}};
  for (size_t i = 0; i < sizeof geometry / sizeof geometry[0]; i++)
    if (geometry[i].got != geometry[i].planned)
      return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                     CALL ": kv->%s is %lld but the plan was made for %lld",
                     geometry[i].name, (long long)geometry[i].got,
                     (long long)geometry[i].planned);
  return FLASHCPU_OK;
}

/* The checks of flashcpu_attention's options that hold here too. */
static flashcpu_status check_options(flashcpu_context *ctx,
                                     const flashcpu_attention_params *params) {
  if (params->kv_lengths)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": params->kv_lengths must be NULL: the plan holds "
                        "the lengths (batch->seq_lens_kv)");
  if (params->tree_mask)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": params->tree_mask must be NULL: the plan holds "
                        "the tree masks (batch->tree_bits)");
  if (params->k_scales || params->v_scales)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL
                   ": params->k_scales and v_scales must be NULL: a "
                   "paged cache's scales are kv->k_scales and kv->v_scales");
  return fc_check_common_params(ctx, CALL, params);
}

flashcpu_status
flashcpu_attention_paged(flashcpu_context *ctx, const flashcpu_plan *plan,
                         const flashcpu_tensor *q, const flashcpu_paged_kv *kv,
                         const flashcpu_tensor *out, float *lse,
                         const flashcpu_attention_params *params) {
  flashcpu_status status;
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  if (!plan)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, CALL ": plan is NULL");
  if (plan->ctx_id != ctx->id)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": the plan was made on another context, or on one "
                        "since destroyed (plans size and use their context's "
                        "memory)");
  flashcpu_attention_params copy;
  if ((status = fc_copy_params(ctx, CALL, params, &copy)) != FLASHCPU_OK)
    return status;
  params = &copy;
  if ((status = check_options(ctx, params)) != FLASHCPU_OK) return status;

  fc_byte_span q_span, out_span, k_span, v_span, scale_spans[4];
  if ((status = check_rows(ctx, plan, q, "q", plan->head_dim, &q_span)) ||
      (status = check_cache(ctx, plan, kv, &k_span, &v_span, scale_spans)) ||
      (status = check_rows(ctx, plan, out, "out", plan->v_head_dim, &out_span)))
    return status;
  if (!fc_output_rows_distinct(out))
    return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                   CALL ": out's strides make different rows share memory");

  /* Options every part shares, on a template problem. */
  fc_problem shared;
  memset(&shared, 0, sizeof shared);
  shared.q_heads = plan->q_heads;
  fc_byte_span inputs[12] = {q_span,         k_span,         v_span,
                             scale_spans[0], scale_spans[1], scale_spans[2],
                             scale_spans[3]};
  const char *names[12] = {"q",
                           "kv->k",
                           "kv->v",
                           "kv->k_scales",
                           "kv->k_scales's zero points",
                           "kv->v_scales",
                           "kv->v_scales's zero points"};
  int count = 7;
  if ((status = fc_check_variants(ctx, CALL, params, &shared, plan->requests,
                                  &inputs[count], &count, &names[count])))
    return status;
  if (params->additive_mask) {
    const int64_t dims[4] = {plan->requests, plan->q_heads, plan->tokens,
                             plan->max_keys};
    if ((status = fc_check_additive(ctx, CALL, params->additive_mask, dims,
                                    &inputs[count])))
      return status;
    names[count++] = "the additive mask";
  }
  fc_byte_span lse_span = {0, 0};
  if (lse) {
    lse_span.begin = (uintptr_t)lse;
    lse_span.end = lse_span.begin + (uintptr_t)plan->q_heads *
                                        (uintptr_t)plan->tokens * sizeof(float);
  }
  if ((status = fc_check_outputs_apart(ctx, CALL, out_span, lse_span, inputs,
                                       names, count)))
    return status;

  /* One problem per part, kernels chosen before any runs, so that an error
   * leaves the output untouched. */
  fc_problem problems[FC_PLAN_PARTS];
  const fc_attention_kernel *kernels[FC_PLAN_PARTS] = {NULL, NULL};
  for (int i = 0; i < FC_PLAN_PARTS; i++) {
    const fc_plan_part *part = &plan->parts[i];
    if (part->count == 0) continue;
    fc_problem *p = &problems[i];
    fc_plan_part_problem(plan, part, p);
    fc_fill_view(q, &p->q);
    fc_fill_view(out, &p->out);
    p->q.row_starts = p->out.row_starts = part->q_starts;
    fc_fill_paged_view(kv, 0, plan->pages, part->page_rows, &p->k);
    fc_fill_paged_view(kv, 1, plan->pages, part->page_rows, &p->v);
    p->lse = lse;
    p->scale = params->scale != 0.0f
                   ? params->scale
                   : (float)(1.0 / sqrt((double)plan->head_dim));
    p->softcap = params->softcap;
    p->causal = (params->flags & FLASHCPU_FLAG_CAUSAL) != 0;
    p->window_left = params->window_left;
    p->window_right = params->window_right;
    p->additive = params->additive_mask;
    p->alibi = shared.alibi;
    p->alibi_batch_stride = shared.alibi_batch_stride;
    p->sinks = shared.sinks;
    p->sinks_dtype = shared.sinks_dtype;
    p->query_offsets = shared.query_offsets;
    char reason[384];
    kernels[i] = fc_kernel_table_choose(&ctx->table, p, reason, sizeof reason);
    if (ctx->verbose)
      fprintf(stderr,
              "[flashcpu] attention_paged %s: %lld requests, %lld rows at "
              "most, %lld keys at most: %s (%s)\n",
              fc_kernel_family_name(part->family), (long long)part->count,
              (long long)part->max_rows, (long long)part->max_keys,
              kernels[i] ? kernels[i]->name : "no kernel", reason);
    if (!kernels[i])
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT, CALL ": %s", reason);
  }
  char ran[sizeof ctx->last_kernels] = "";
  for (int i = 0; i < FC_PLAN_PARTS; i++) {
    if (!kernels[i]) continue;
    const size_t used = strlen(ran);
    snprintf(ran + used, sizeof ran - used, "%s%s", used ? ", " : "",
             kernels[i]->name);
  }
  char kernel_reason[256], second_reason[256];
  fc_kernel_env env =
      fc_context_kernel_env(ctx, kernel_reason, sizeof kernel_reason);
  if (kernels[0] && kernels[1]) {
    /* Both families in one launch: the split-KV tiles, bound by memory,
     * beside the prefill tiles, bound by arithmetic, so that they overlap
     * instead of following each other. The schedule never changes the
     * bytes. */
    fc_fuse fuse = {
        kernels[1]->run, &problems[1], second_reason, sizeof second_reason,
        FLASHCPU_OK,     NULL,         false};
    env.fuse = &fuse;
    status = kernels[0]->run(&env, &problems[0]);
    if (fuse.second_status != FLASHCPU_OK)
      return fc_fail(ctx, fuse.second_status, CALL ": %s: %s", kernels[1]->name,
                     second_reason[0] ? second_reason : "failed");
    if (status != FLASHCPU_OK)
      return fc_fail(ctx, status, CALL ": %s: %s", kernels[0]->name,
                     kernel_reason[0] ? kernel_reason : "failed");
  } else if (kernels[0] || kernels[1]) { /* one family (none: T = 0) */
    const int i = kernels[0] ? 0 : 1;
    status = kernels[i]->run(&env, &problems[i]);
    if (status != FLASHCPU_OK)
      return fc_fail(ctx, status, CALL ": %s: %s", kernels[i]->name,
                     kernel_reason[0] ? kernel_reason : "failed");
  }
  memcpy(ctx->last_kernels, ran, sizeof ran);
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
