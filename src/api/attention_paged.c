/* flashcpu_attention_paged: check one layer's call against its plan, then
 * bind its data to the plan's kernels and launch them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/check.h"
#include "api/context_internal.h"
#include "api/errors.h"
#include "api/paged_check.h"
#include "api/plan_internal.h"
#include "dispatch/plan_execute.h"

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

/* The call's q, out and cache dtypes (and whether the cache's scales vary
 * along a row) are the ones the plan chose its kernels for. */
static flashcpu_status check_planned_views(flashcpu_context *ctx,
                                           const fc_problem *planned,
                                           const fc_problem *now) {
  const struct {
    const fc_view *planned, *now;
    const char *name;
  } views[] = {{&planned->q, &now->q, "q->dtype"},
               {&planned->out, &now->out, "out->dtype"},
               {&planned->k, &now->k, "kv->k_dtype"},
               {&planned->v, &now->v, "kv->v_dtype"}};
  for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
    if (views[i].now->dtype != views[i].planned->dtype)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": %s is %s but the plan was made for %s",
                     views[i].name, flashcpu_dtype_name(views[i].now->dtype),
                     flashcpu_dtype_name(views[i].planned->dtype));
  for (int s = 2; s < 4; s++) {
    const fc_view *a = views[s].planned, *b = views[s].now;
    if (!a->scales != !b->scales || !a->zeros != !b->zeros ||
        (a->scales && a->scale_dtype != b->scale_dtype) ||
        (a->scale_strides[3] == 0) != (b->scale_strides[3] == 0))
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": kv->%s_scales differ from the ones the plan was "
                          "made with (present, zero points, dtype, or per "
                          "channel)",
                     s == 2 ? "k" : "v");
  }
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

  /* The plan's problems with this call's data and options, and copies of
   * its kernel plans to bind them to (the plan itself stays const). */
  fc_problem problems[FC_PLAN_PARTS];
  fc_kernel_plan kernel_plans[FC_PLAN_PARTS];
  fc_kernel_plan *bound[FC_PLAN_PARTS];
  const fc_problem *bound_problems[FC_PLAN_PARTS];
  int parts = 0;
  char ran[sizeof ctx->last_kernels] = "";
  for (int i = 0; i < FC_PLAN_PARTS; i++) {
    const fc_plan_part *part = &plan->parts[i];
    if (part->count == 0) continue;
    fc_problem *p = &problems[parts];
    *p = plan->problems[i];
    fc_fill_view(q, &p->q);
    fc_fill_view(out, &p->out);
    p->q.row_starts = p->out.row_starts = part->q_starts;
    fc_fill_paged_view(kv, 0, plan->pages, part->page_rows, &p->k);
    fc_fill_paged_view(kv, 1, plan->pages, part->page_rows, &p->v);
    if ((status = check_planned_views(ctx, &plan->problems[i], p)))
      return status;
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
    if (ctx->verbose)
      fprintf(stderr,
              "[flashcpu] attention_paged %s: %lld requests, %lld rows at "
              "most, %lld keys at most: %s\n",
              fc_kernel_family_name(part->family), (long long)part->count,
              (long long)part->max_rows, (long long)part->max_keys,
              plan->kernels[i]->name);
    kernel_plans[parts] = plan->kernel_plans[i];
    bound[parts] = &kernel_plans[parts];
    bound_problems[parts] = p;
    const size_t used = strlen(ran);
    snprintf(ran + used, sizeof ran - used, "%s%s", used ? ", " : "",
             plan->kernels[i]->name);
    parts++;
  }
  /* Both families in one launch (fc_plans_launch): the split-KV tiles,
   * bound by memory, beside the prefill tiles, bound by arithmetic. The
   * schedule never changes the bytes. Reserving again only checks: the
   * plan reserved the context's memory when it was made. */
  char reason[256];
  if (fc_plans_reserve(&ctx->runtime, bound, parts, plan->workspace == NULL,
                       reason, sizeof reason) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": %s", reason);
  if (fc_plans_launch(&ctx->runtime, bound, bound_problems, parts,
                      plan->workspace) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory launching");
  memcpy(ctx->last_kernels, ran, sizeof ran);
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
