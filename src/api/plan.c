/* flashcpu_plan_create: check a step's lengths, block table and tree masks
 * once, copy them, split the requests by kernel family, choose and plan
 * each family's kernel, and reserve the context's memory for running
 * them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/batch_check.h"
#include "api/paged_check.h"
#include "api/plan_internal.h"
#include "common/quant.h"
#include "dispatch/plan_execute.h"
#include "kernels/decode/decode_splitkv.h"

#define CALL "flashcpu_plan_create"

/* Pages a request of `keys` keys uses. */
static int64_t pages_of(int64_t keys, int64_t page_size) {
  return (keys + page_size - 1) / page_size;
}

void flashcpu_plan_destroy(flashcpu_plan *plan) {
  if (!plan) return;
  for (int i = 0; i < FC_PLAN_PARTS; i++) free(plan->parts[i].q_lens);
  free(plan->pages);
  free(plan->tree_bits);
  free(plan);
}

int64_t flashcpu_plan_num_tokens(const flashcpu_plan *plan) {
  return plan ? plan->tokens : 0;
}

/* Fills the plan from a checked batch; 0, or -1 when out of memory. */
static int fill_plan(const flashcpu_batch *batch, const unsigned char *families,
                     flashcpu_plan *plan) {
  const int64_t R = batch->num_requests;
  const int32_t *cu = batch->cu_seqlens_q;
  int64_t counts[FC_PLAN_PARTS] = {0, 0}, total_pages = 0;
  for (int64_t r = 0; r < R; r++) {
    if (cu[r + 1] > cu[r]) counts[families[r]]++;
    total_pages += pages_of(batch->seq_lens_kv[r], plan->page_size);
  }
  plan->pages =
      malloc((size_t)(total_pages ? total_pages : 1) * sizeof(int32_t));
  if (!plan->pages) return -1;
  for (int i = 0; i < FC_PLAN_PARTS; i++) {
    fc_plan_part *part = &plan->parts[i];
    part->family = (fc_kernel_family)i;
    const size_t n = (size_t)(counts[i] ? counts[i] : 1);
    part->q_lens = malloc((7 * n + 1) * sizeof(int64_t));
    if (!part->q_lens) return -1;
    part->q_starts = part->q_lens + n;
    part->kv_lengths = part->q_starts + n;
    part->page_rows = part->kv_lengths + n;
    part->tree_keys = part->page_rows + n;
    part->batch_ids = part->tree_keys + n;
    part->tile_starts = part->batch_ids + n;
  }
  if (batch->tree_mask) {
    int64_t words = 0;
    for (int64_t r = 0; r < R; r++)
      if ((batch->tree_num_keys[r] + 63) / 64 > words)
        words = (batch->tree_num_keys[r] + 63) / 64;
    if (words > 0) {
      plan->tree_bits =
          calloc((size_t)(plan->tokens ? plan->tokens : 1) * (size_t)words,
                 sizeof(uint64_t));
      if (!plan->tree_bits) return -1;
      for (int64_t r = 0; r < R; r++) {
        const int64_t n = (batch->tree_num_keys[r] + 63) / 64;
        for (int64_t t = cu[r]; t < cu[r + 1]; t++)
          memcpy(plan->tree_bits + t * words,
                 batch->tree_mask->bits + t * batch->tree_mask->row_stride,
                 (size_t)n * sizeof(uint64_t));
      }
      plan->tree.bits = plan->tree_bits;
      plan->tree.num_rows = plan->tokens;
      plan->tree.num_keys = 1; /* per request: the parts' tree_keys */
      plan->tree.row_stride = words;
      plan->tree.batch_stride = 0;
    }
  }
  int64_t page_at = 0;
  for (int64_t r = 0; r < R; r++) {
    const int64_t keys = batch->seq_lens_kv[r];
    const int64_t used = pages_of(keys, plan->page_size);
    const int64_t start = batch->block_offsets ? batch->block_offsets[r]
                                               : r * batch->block_table_stride;
    memcpy(plan->pages + page_at, batch->block_table + start,
           (size_t)used * sizeof(int32_t));
    const int64_t rows = cu[r + 1] - cu[r];
    if (keys > plan->max_keys) plan->max_keys = keys;
    if (rows > 0) {
      fc_plan_part *part = &plan->parts[families[r]];
      const int64_t i = part->count++;
      const int64_t tree_keys = plan->tree_bits ? batch->tree_num_keys[r] : 0;
      part->q_lens[i] = rows;
      part->q_starts[i] = cu[r];
      part->kv_lengths[i] = keys;
      part->page_rows[i] = page_at;
      part->tree_keys[i] = tree_keys;
      part->batch_ids[i] = r;
      part->has_trees = part->has_trees || tree_keys > 0;
      part->rows += rows;
      part->keys += keys;
      if (rows > part->max_rows) part->max_rows = rows;
      if (keys > part->max_keys) part->max_keys = keys;
    }
    page_at += used;
  }
  return 0;
}

/* The problem a part runs, as far as a plan knows it: shapes, lengths,
 * dtypes and the cache's views (call options and q/out data unset). */
static void part_problem(const flashcpu_plan *plan, const fc_plan_part *part,
                         const flashcpu_paged_kv *kv, fc_problem *p) {
  memset(p, 0, sizeof *p);
  p->batch = part->count;
  p->q_len = part->max_rows;
  p->kv_capacity = part->max_keys;
  p->q_heads = plan->q_heads;
  p->kv_heads = plan->kv_heads;
  p->group = plan->q_heads / plan->kv_heads;
  p->head_dim = plan->head_dim;
  p->v_head_dim = plan->v_head_dim;
  p->scale = 1.0f;
  p->window_left = p->window_right = -1;
  p->kv_lengths = part->kv_lengths;
  p->q_lens = part->q_lens;
  p->q_starts = part->q_starts;
  p->batch_ids = part->batch_ids;
  p->lse_batch_stride = 0;
  p->lse_head_stride = plan->tokens;
  p->tile_starts = part->tile_starts;
  if (part->has_trees) {
    p->tree = &plan->tree;
    p->tree_keys = part->tree_keys;
  }
  p->q.dtype = plan->q_dtype;
  p->out.dtype = plan->out_dtype;
  p->q.element_size = (int64_t)flashcpu_dtype_size(plan->q_dtype);
  p->out.element_size = (int64_t)flashcpu_dtype_size(plan->out_dtype);
  p->q.row_starts = p->out.row_starts = part->q_starts;
  fc_fill_paged_view(kv, 0, plan->pages, part->page_rows, &p->k);
  fc_fill_paged_view(kv, 1, plan->pages, part->page_rows, &p->v);
}

/* Which family's kernel runs each request: the one the context chooses
 * for it alone (requests without rows: any). */
static flashcpu_status request_families(flashcpu_context *ctx,
                                        const flashcpu_batch *batch,
                                        const flashcpu_plan *plan,
                                        const flashcpu_paged_kv *kv,
                                        unsigned char *families) {
  fc_plan_part one = {0};
  int64_t zero = 0, keys = 0, rows = 0;
  int32_t page = 0;
  one.count = 1;
  one.q_lens = &rows;
  one.q_starts = one.page_rows = one.tree_keys = one.batch_ids = &zero;
  one.kv_lengths = &keys;
  fc_problem p; /* one request's: made once, its lengths set per request */
  flashcpu_plan probe = *plan;
  probe.pages = &page;
  part_problem(&probe, &one, kv, &p);
  for (int64_t r = 0; r < batch->num_requests; r++) {
    rows = batch->cu_seqlens_q[r + 1] - batch->cu_seqlens_q[r];
    families[r] = FC_FAMILY_PREFILL;
    if (rows == 0) continue;
    keys = batch->seq_lens_kv[r];
    p.q_len = rows;
    p.kv_capacity = keys;
    char reason[384];
    const fc_attention_kernel *kernel =
        fc_kernel_table_choose(&ctx->table, &p, reason, sizeof reason);
    if (!kernel)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": request %lld (%lld query rows): %s", (long long)r,
                     (long long)rows, reason);
    families[r] = (unsigned char)kernel->family;
  }
  return FLASHCPU_OK;
}

/* Chooses and plans each part's kernel, and reserves the context's memory
 * for them, so that running the plan allocates nothing. */
static flashcpu_status plan_parts(flashcpu_context *ctx, flashcpu_plan *plan,
                                  const flashcpu_paged_kv *kv) {
  fc_kernel_plan *planned[FC_PLAN_PARTS];
  int count = 0;
  char reason[384];
  for (int i = 0; i < FC_PLAN_PARTS; i++) {
    const fc_plan_part *part = &plan->parts[i];
    if (part->count == 0) continue;
    fc_problem *p = &plan->problems[i];
    part_problem(plan, part, kv, p);
    const fc_attention_kernel *kernel =
        fc_kernel_table_choose(&ctx->table, p, reason, sizeof reason);
    if (!kernel || kernel->family != part->family)
      return fc_fail(ctx, FLASHCPU_ERROR_INTERNAL,
                     CALL ": the %s requests get %s (%s)",
                     fc_kernel_family_name(part->family),
                     kernel ? kernel->name : "no kernel", reason);
    fc_kernel_env env = fc_context_kernel_env(ctx, reason, sizeof reason);
    env.tile_slots = fc_kernel_tile_slots(kernel, env.settings);
    flashcpu_status status = kernel->plan(&env, p, &plan->kernel_plans[i]);
    if (status != FLASHCPU_OK)
      return fc_fail(ctx, status, CALL ": %s: %s", kernel->name,
                     reason[0] ? reason : "failed");
    plan->kernels[i] = kernel;
    planned[count++] = &plan->kernel_plans[i];
  }
  plan->workspace_bytes = fc_plans_workspace_bytes(planned, count);
  if (fc_plans_reserve(&ctx->runtime, planned, count, true, reason,
                       sizeof reason) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": %s", reason);
  return FLASHCPU_OK;
}

flashcpu_status flashcpu_plan_create(flashcpu_context *ctx,
                                     const flashcpu_batch *batch,
                                     int64_t q_heads, flashcpu_dtype q_dtype,
                                     flashcpu_dtype out_dtype,
                                     const flashcpu_paged_kv *kv,
                                     flashcpu_plan **plan) {
  if (!plan)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, CALL ": plan is NULL");
  *plan = NULL;
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  const struct {
    flashcpu_dtype dtype;
    const char *name;
  } dtypes[] = {{q_dtype, "q_dtype"}, {out_dtype, "out_dtype"}};
  for (int i = 0; i < 2; i++)
    if (!fc_dtype_is_float(dtypes[i].dtype))
      return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                     CALL ": %s is %d; q and out are f32, f16 or bf16",
                     dtypes[i].name, (int)dtypes[i].dtype);
  flashcpu_status status =
      fc_check_paged_kv(ctx, CALL, kv, false, NULL, NULL, NULL);
  if (status != FLASHCPU_OK) return status;
  if (q_heads < 1 || q_heads % kv->kv_heads != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                   CALL ": q_heads is %lld; it must be a positive multiple of "
                        "kv->kv_heads (%lld) for GQA",
                   (long long)q_heads, (long long)kv->kv_heads);
  if ((status = fc_check_batch(ctx, batch, kv)) != FLASHCPU_OK) return status;

  flashcpu_plan *made = calloc(1, sizeof *made);
  unsigned char *families = malloc((size_t)batch->num_requests);
  if (!made || !families) {
    free(made);
    free(families);
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  }
  made->ctx_id = ctx->id;
  made->requests = batch->num_requests;
  made->tokens = batch->cu_seqlens_q[batch->num_requests];
  made->q_heads = q_heads;
  made->kv_heads = kv->kv_heads;
  made->head_dim = kv->head_dim;
  made->v_head_dim = kv->v_head_dim;
  made->page_size = kv->page_size;
  made->num_pages = kv->num_pages;
  made->q_dtype = q_dtype;
  made->out_dtype = out_dtype;
  status = request_families(ctx, batch, made, kv, families);
  if (status == FLASHCPU_OK && fill_plan(batch, families, made) != 0)
    status = fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                     CALL ": out of memory copying the batch");
  free(families);
  if (status == FLASHCPU_OK) status = plan_parts(ctx, made, kv);
  if (status != FLASHCPU_OK) {
    flashcpu_plan_destroy(made);
    return status;
  }
  *plan = made;
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}

size_t flashcpu_plan_workspace_size(const flashcpu_plan *plan) {
  return plan ? plan->workspace_bytes : 0;
}

flashcpu_status flashcpu_plan_set_workspace(flashcpu_context *ctx,
                                            flashcpu_plan *plan,
                                            void *workspace, size_t size) {
#define SET_CALL "flashcpu_plan_set_workspace"
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, SET_CALL ": ctx is NULL");
  if (!plan)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, SET_CALL ": plan is NULL");
  if (workspace && ((uintptr_t)workspace & 63) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                   SET_CALL ": workspace %p is not 64-byte aligned", workspace);
  if (workspace && size < plan->workspace_bytes)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   SET_CALL ": the workspace has %zu bytes; the plan needs %zu "
                            "(flashcpu_plan_workspace_size)",
                   size, plan->workspace_bytes);
  plan->workspace = workspace;
  fc_clear_error(ctx);
  return FLASHCPU_OK;
#undef SET_CALL
}

size_t flashcpu_plan_describe(const flashcpu_plan *plan, char *buffer,
                              size_t size) {
  char text[512];
  int used;
  if (!plan) {
    used = snprintf(text, sizeof text, "no plan\n");
  } else {
    used = snprintf(text, sizeof text,
                    "plan: %lld requests, %lld query rows, Hq %lld, Hkv "
                    "%lld, D %lld, Dv %lld, pages of %lld tokens\n",
                    (long long)plan->requests, (long long)plan->tokens,
                    (long long)plan->q_heads, (long long)plan->kv_heads,
                    (long long)plan->head_dim, (long long)plan->v_head_dim,
                    (long long)plan->page_size);
    for (int i = 0; i < FC_PLAN_PARTS; i++) {
      const fc_plan_part *part = &plan->parts[i];
      if (part->count == 0) continue;
      used +=
          snprintf(text + used, sizeof text - (size_t)used,
                   "  %s: %lld requests, %lld rows (at most %lld), %lld "
                   "keys (at most %lld)%s\n",
                   fc_kernel_family_name(part->family), (long long)part->count,
                   (long long)part->rows, (long long)part->max_rows,
                   (long long)part->keys, (long long)part->max_keys,
                   part->has_trees ? ", tree masks" : "");
      if (used >= (int)sizeof text) used = (int)sizeof text - 1;
    }
  }
  if (buffer && size) {
    size_t copy = (size_t)used < size - 1 ? (size_t)used : size - 1;
    memcpy(buffer, text, copy);
    buffer[copy] = '\0';
  }
  return (size_t)used;
}
