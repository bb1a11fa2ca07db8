/* flashcpu_plan_create: check a step's lengths, block table and tree masks
 * once, copy them, split the requests by kernel family, and reserve the
 * context's memory for running them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/paged_check.h"
#include "api/plan_internal.h"
#include "common/quant.h"
#include "kernels/decode/decode_splitkv.h"

#define CALL "flashcpu_plan_create"

/* Pages request r uses. */
static int64_t pages_of(int64_t keys, int64_t page_size) {
  return (keys + page_size - 1) / page_size;
}

static flashcpu_status check_batch(flashcpu_context *ctx,
                                   const flashcpu_batch *batch,
                                   const flashcpu_paged_kv *kv) {
  if (!batch)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, CALL ": batch is NULL");
  if (batch->struct_size != sizeof(flashcpu_batch))
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": batch->struct_size is %zu, expected %zu (call "
                        "flashcpu_batch_init first)",
                   batch->struct_size, sizeof(flashcpu_batch));
  const int64_t R = batch->num_requests;
  if (R < 1)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": batch->num_requests is %lld; it must be >= 1",
                   (long long)R);
  const struct {
    const void *pointer;
    const char *name;
  } required[] = {{batch->cu_seqlens_q, "cu_seqlens_q"},
                  {batch->seq_lens_kv, "seq_lens_kv"},
                  {batch->block_table, "block_table"}};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
    if (!required[i].pointer)
      return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                     CALL ": batch->%s is NULL", required[i].name);
  const int32_t *cu = batch->cu_seqlens_q;
  if (cu[0] != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": batch->cu_seqlens_q[0] is %d; it must be 0",
                   (int)cu[0]);
  for (int64_t r = 0; r < R; r++) {
    if (cu[r + 1] < cu[r])
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": batch->cu_seqlens_q[%lld] is %d, below "
                          "cu_seqlens_q[%lld] = %d (it must not decrease)",
                     (long long)(r + 1), (int)cu[r + 1], (long long)r,
                     (int)cu[r]);
    if (batch->seq_lens_kv[r] < 0)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": batch->seq_lens_kv[%lld] is %d; it must be >= 0",
                     (long long)r, (int)batch->seq_lens_kv[r]);
  }
  const int32_t *offsets = batch->block_offsets;
  if (!offsets &&
      (batch->block_table_stride < 0 || batch->block_table_stride > INT32_MAX))
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": batch->block_table_stride is %lld; it must be in "
                        "[0, 2^31)",
                   (long long)batch->block_table_stride);
  for (int64_t r = 0; r < R; r++) {
    const int64_t needed = pages_of(batch->seq_lens_kv[r], kv->page_size);
    int64_t start = r * batch->block_table_stride;
    int64_t room = batch->block_table_stride;
    if (offsets) {
      if (offsets[r] < 0 || offsets[r + 1] < offsets[r])
        return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                       CALL ": batch->block_offsets[%lld .. %lld] is %d .. "
                            "%d; offsets must be >= 0 and must not decrease",
                       (long long)r, (long long)(r + 1), (int)offsets[r],
                       (int)offsets[r + 1]);
      start = offsets[r];
      room = offsets[r + 1] - offsets[r];
    }
    if (needed > room) {
      char row[160];
      if (offsets)
        snprintf(row, sizeof row,
                 "batch->block_offsets[%lld .. %lld] give its row room for "
                 "%lld",
                 (long long)r, (long long)(r + 1), (long long)room);
      else
        snprintf(row, sizeof row,
                 "batch->block_table_stride is %lld: room for %lld",
                 (long long)room, (long long)room);
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": batch->seq_lens_kv[%lld] is %d (request "
                          "%lld): %lld pages of %lld tokens, but %s",
                     (long long)r, (int)batch->seq_lens_kv[r], (long long)r,
                     (long long)needed, (long long)kv->page_size, row);
    }
    for (int64_t i = 0; i < needed; i++) {
      const int32_t page = batch->block_table[start + i];
      if (page < 0 || page >= kv->num_pages)
        return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                       CALL ": batch->block_table[%lld] (request %lld, its "
                            "page %lld) is %d; pages are 0 .. %lld",
                       (long long)(start + i), (long long)r, (long long)i,
                       (int)page, (long long)(kv->num_pages - 1));
    }
  }
  if (!batch->tree_bits != !batch->tree_num_keys)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": batch->tree_bits and batch->tree_num_keys go "
                        "together: one is NULL, the other is not");
  if (batch->tree_num_keys)
    for (int64_t r = 0; r < R; r++) {
      const int32_t n = batch->tree_num_keys[r];
      if (n < 0 || n > batch->seq_lens_kv[r])
        return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                       CALL ": batch->tree_num_keys[%lld] is %d; it must be "
                            "in [0, seq_lens_kv[%lld] = %d]",
                       (long long)r, (int)n, (long long)r,
                       (int)batch->seq_lens_kv[r]);
      if ((n + 63) / 64 > batch->tree_row_stride)
        return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                       CALL ": batch->tree_row_stride is %lld words; request "
                            "%lld's %d tree keys need at least %d",
                       (long long)batch->tree_row_stride, (long long)r, (int)n,
                       (n + 63) / 64);
    }
  return FLASHCPU_OK;
}

/* Which family runs a request of `rows` rows (a forced kernel's, else
 * split-KV for up to splitkv_max_rows); false if the forced one cannot. */
static bool family_of(const flashcpu_context *ctx, int64_t rows,
                      fc_kernel_family *family) {
  const fc_attention_kernel *forced = ctx->table.forced;
  if (forced) {
    *family = forced->family;
    return forced->family != FC_FAMILY_SPLITKV || rows <= FC_SPLITKV_MAX_ROWS;
  }
  bool has_splitkv = false; /* a scalar context has none */
  for (size_t i = 0; i < ctx->table.candidate_count; i++)
    has_splitkv =
        has_splitkv || ctx->table.candidates[i]->family == FC_FAMILY_SPLITKV;
  *family = has_splitkv && rows <= ctx->table.settings.splitkv_max_rows
                ? FC_FAMILY_SPLITKV
                : FC_FAMILY_PREFILL;
  return true;
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
static int fill_plan(const flashcpu_context *ctx, const flashcpu_batch *batch,
                     flashcpu_plan *plan) {
  const int64_t R = batch->num_requests;
  const int32_t *cu = batch->cu_seqlens_q;
  int64_t counts[FC_PLAN_PARTS] = {0, 0}, total_pages = 0;
  for (int64_t r = 0; r < R; r++) {
    fc_kernel_family family;
    family_of(ctx, cu[r + 1] - cu[r], &family);
    if (cu[r + 1] > cu[r]) counts[family]++;
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
  if (batch->tree_bits) {
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
                 batch->tree_bits + t * batch->tree_row_stride,
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
      fc_kernel_family family;
      family_of(ctx, rows, &family);
      fc_plan_part *part = &plan->parts[family];
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

void fc_plan_part_problem(const flashcpu_plan *plan, const fc_plan_part *part,
                          fc_problem *p) {
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
  p->q.row_starts = p->out.row_starts = part->q_starts;
  p->q.element_size = p->out.element_size = 4;
  p->k.pages = p->v.pages = plan->pages;
  p->k.page_rows = p->v.page_rows = part->page_rows;
  p->k.page_size = p->v.page_size = plan->page_size;
  p->k.page_shift = p->v.page_shift = -1;
  p->k.element_size = p->v.element_size = 4;
}

/* The dtypes a plan reserves for: q and K/V in f32, in bf16, and q in
 * either over quantized pages' own dtypes. */
typedef struct plan_dtypes {
  flashcpu_dtype q, k, v;
} plan_dtypes;

static int plan_dtypes_of(const flashcpu_plan *plan, plan_dtypes *out) {
  int count = 0;
  out[count++] =
      (plan_dtypes){FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F32};
  out[count++] = (plan_dtypes){FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_BF16,
                               FLASHCPU_DTYPE_BF16};
  if (fc_dtype_is_quantized(plan->k_dtype) ||
      fc_dtype_is_quantized(plan->v_dtype)) {
    out[count++] =
        (plan_dtypes){FLASHCPU_DTYPE_F32, plan->k_dtype, plan->v_dtype};
    out[count++] =
        (plan_dtypes){FLASHCPU_DTYPE_BF16, plan->k_dtype, plan->v_dtype};
  }
  return count;
}

static void set_view_dtype(fc_view *view, flashcpu_dtype dtype) {
  view->dtype = dtype;
  view->quantized = fc_dtype_is_quantized(dtype);
  if (view->quantized) view->element_size = 1;
}

/* Sizes the context's scratch, workspace and tile order for the plan's
 * parts, so that running it allocates nothing: for every kernel a part can
 * get, which depends on the layer's dtypes (bf16 takes dot-product rows,
 * quantized pages kernels of their own). */
static flashcpu_status reserve(flashcpu_context *ctx,
                               const flashcpu_plan *plan) {
  plan_dtypes dtypes[4];
  const int dtype_count = plan_dtypes_of(plan, dtypes);
  int64_t fused_tiles = 0; /* both parts' tiles in one launch */
  for (int i = 0; i < FC_PLAN_PARTS; i++) {
    int64_t most_tiles = 0;
    const fc_plan_part *part = &plan->parts[i];
    if (part->count == 0) continue;
    const fc_attention_kernel *reserved[4] = {NULL, NULL, NULL, NULL};
    int reserved_count = 0;
    char reason[384] = "";
    for (int d = 0; d < dtype_count; d++) {
      fc_problem p;
      fc_plan_part_problem(plan, part, &p);
      p.q.dtype = p.out.dtype = dtypes[d].q;
      set_view_dtype(&p.k, dtypes[d].k);
      set_view_dtype(&p.v, dtypes[d].v);
      const fc_attention_kernel *kernel =
          fc_kernel_table_choose(&ctx->table, &p, reason, sizeof reason);
      bool seen = kernel == NULL;
      for (int r = 0; r < reserved_count; r++)
        seen = seen || kernel == reserved[r];
      if (seen) continue;
      char kernel_reason[256];
      fc_kernel_env env =
          fc_context_kernel_env(ctx, kernel_reason, sizeof kernel_reason);
      int64_t tiles = 0;
      env.reserve_only = true;
      env.reserved_tiles = &tiles;
      flashcpu_status status = kernel->run(&env, &p);
      if (tiles > most_tiles) most_tiles = tiles;
      if (status != FLASHCPU_OK)
        return fc_fail(ctx, status, CALL ": %s: %s", kernel->name,
                       kernel_reason[0] ? kernel_reason : "failed");
      reserved[reserved_count++] = kernel;
    }
    if (reserved_count == 0)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT, CALL ": %s", reason);
    fused_tiles += most_tiles;
  }
  if (fc_runtime_reserve_tile_order(&ctx->runtime, fused_tiles) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory ordering %lld tiles",
                   (long long)fused_tiles);
  return FLASHCPU_OK;
}

flashcpu_status flashcpu_plan_create(flashcpu_context *ctx,
                                     const flashcpu_batch *batch,
                                     int64_t q_heads,
                                     const flashcpu_paged_kv *kv,
                                     flashcpu_plan **plan) {
  if (!plan)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, CALL ": plan is NULL");
  *plan = NULL;
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  flashcpu_status status =
      fc_check_paged_kv(ctx, CALL, kv, false, NULL, NULL, NULL);
  if (status != FLASHCPU_OK) return status;
  if (q_heads < 1 || q_heads % kv->kv_heads != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                   CALL ": q_heads is %lld; it must be a positive multiple of "
                        "kv->kv_heads (%lld) for GQA",
                   (long long)q_heads, (long long)kv->kv_heads);
  if ((status = check_batch(ctx, batch, kv)) != FLASHCPU_OK) return status;
  for (int64_t r = 0; r < batch->num_requests; r++) {
    const int64_t rows = batch->cu_seqlens_q[r + 1] - batch->cu_seqlens_q[r];
    fc_kernel_family family;
    if (!family_of(ctx, rows, &family))
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": request %lld has %lld query rows; the forced "
                          "kernel %s takes at most %d",
                     (long long)r, (long long)rows, ctx->table.forced->name,
                     FC_SPLITKV_MAX_ROWS);
  }

  flashcpu_plan *made = calloc(1, sizeof *made);
  if (!made)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  made->ctx_id = ctx->id;
  made->requests = batch->num_requests;
  made->tokens = batch->cu_seqlens_q[batch->num_requests];
  made->q_heads = q_heads;
  made->kv_heads = kv->kv_heads;
  made->head_dim = kv->head_dim;
  made->v_head_dim = kv->v_head_dim;
  made->page_size = kv->page_size;
  made->num_pages = kv->num_pages;
  made->k_dtype = kv->k_dtype;
  made->v_dtype = kv->v_dtype;
  if (fill_plan(ctx, batch, made) != 0) {
    flashcpu_plan_destroy(made);
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory copying the batch");
  }
  if ((status = reserve(ctx, made)) != FLASHCPU_OK) {
    flashcpu_plan_destroy(made);
    return status;
  }
  *plan = made;
  fc_clear_error(ctx);
  return FLASHCPU_OK;
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
