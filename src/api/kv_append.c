/* flashcpu_kv_append: check the new rows, the slots and the cache, then
 * write (kernels/append). Nothing is written unless every check passes. */
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/paged_check.h"
#include "common/dtype_convert.h"
#include "kernels/append/kv_append.h"

#define CALL "flashcpu_kv_append"

static flashcpu_status check_rows(flashcpu_context *ctx,
                                  const flashcpu_tensor *t, const char *name,
                                  int64_t tokens, int64_t heads, int64_t dim,
                                  fc_byte_span *span) {
  flashcpu_status status = fc_check_tensor(ctx, CALL, t, name, 0, span);
  if (status != FLASHCPU_OK) return status;
  const int64_t expected[4] = {1, tokens < 0 ? t->dims[1] : tokens, heads, dim};
  static const char *const what[4] = {"batch (new rows are [1, T, Hkv, D])",
                                      "seq (k_new's T)", "heads (kv_heads)",
                                      "head_dim"};
  for (int d = 0; d < 4; d++)
    if (t->dims[d] != expected[d])
      return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                     CALL ": %s->dims[%d] is %lld; the cache needs %lld, its "
                          "%s",
                     name, d, (long long)t->dims[d], (long long)expected[d],
                     what[d]);
  return FLASHCPU_OK;
}

static int compare_slots(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Every slot -1 or in range, none twice (sorted copy in the workspace). */
static flashcpu_status check_slots(flashcpu_context *ctx, const int64_t *slots,
                                   int64_t tokens, int64_t capacity) {
  int64_t used = 0;
  for (int64_t t = 0; t < tokens; t++) {
    if (slots[t] == -1) continue;
    if (slots[t] < 0 || slots[t] >= capacity)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": slot_mapping[%lld] is %lld; slots are -1 (skip) "
                          "or 0 .. %lld (num_pages * page_size - 1)",
                     (long long)t, (long long)slots[t],
                     (long long)(capacity - 1));
    used++;
  }
  if (used < 2) return FLASHCPU_OK;
  if (fc_runtime_reserve_call_workspace(&ctx->runtime,
                                        (size_t)used * sizeof(int64_t)) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory checking %lld slots", (long long)used);
  int64_t *sorted = ctx->runtime.call_workspace;
  int64_t n = 0;
  for (int64_t t = 0; t < tokens; t++)
    if (slots[t] >= 0) sorted[n++] = slots[t];
  qsort(sorted, (size_t)n, sizeof *sorted, compare_slots);
  for (int64_t i = 1; i < n; i++)
    if (sorted[i] == sorted[i - 1]) {
      int64_t first = -1, second = -1;
      for (int64_t t = 0; t < tokens && second < 0; t++)
        if (slots[t] == sorted[i]) {
          if (first < 0)
            first = t;
          else
            second = t;
        }
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": slot_mapping[%lld] and slot_mapping[%lld] are "
                          "both %lld; a slot may be written once per call",
                     (long long)first, (long long)second, (long long)sorted[i]);
    }
  return FLASHCPU_OK;
}

/* The side of a cache that a source row goes to. */
static void fill_side(const flashcpu_paged_kv *kv, int s,
                      const flashcpu_tensor *source, fc_append_side *side) {
  fc_fill_view(source, &side->source);
  side->cache = s ? kv->v : kv->k;
  side->cache_dtype = s ? kv->v_dtype : kv->k_dtype;
  const int64_t *strides = s ? kv->v_strides : kv->k_strides;
  const int64_t size = (int64_t)flashcpu_dtype_size(side->cache_dtype);
  for (int d = 0; d < 3; d++)
    side->byte_strides[d] = side->cache_dtype == FLASHCPU_DTYPE_Q8_0
                                ? strides[d] / 32 * size
                                : strides[d] * size;
  side->dim = s ? kv->v_head_dim : kv->head_dim;
  const flashcpu_kv_scales *scales = s ? kv->v_scales : kv->k_scales;
  if (scales) {
    side->scales = (char *)scales->data;
    side->zeros = (char *)scales->zero_points;
    side->scale_dtype = scales->dtype;
    memcpy(side->scale_strides, scales->strides, sizeof side->scale_strides);
    side->scales_computed = fc_scales_computed(scales);
  }
}

/* Quantized pages with read scales: every row they get must be
 * representable, checked before anything is written. */
static flashcpu_status check_quantizable(flashcpu_context *ctx,
                                         const fc_append_side *side,
                                         const char *name, const int64_t *slots,
                                         int64_t tokens, int64_t kv_heads,
                                         int64_t page_size) {
  if (!fc_dtype_is_quantized(side->cache_dtype)) return FLASHCPU_OK;
  if (side->scales_computed && side->cache_dtype == FLASHCPU_DTYPE_U8 &&
      !side->zeros)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": the %s pages are U8 with per-token scales, which "
                        "need zero_points",
                   name);
  if (side->scales_computed || side->cache_dtype == FLASHCPU_DTYPE_Q8_0)
    return FLASHCPU_OK;
  if (fc_runtime_reserve_call_workspace(&ctx->runtime,
                                        (size_t)side->dim * sizeof(float)) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   CALL ": out of memory checking the new rows");
  float *row = ctx->runtime.call_workspace;
  for (int64_t t = 0; t < tokens; t++) {
    if (slots[t] < 0) continue;
    for (int64_t h = 0; h < kv_heads; h++) {
      fc_row_scales_out scales;
      fc_append_target(side, slots[t] / page_size, slots[t] % page_size, h,
                       &scales);
      fc_load_row_f32(fc_view_row(&side->source, 0, t, h), side->source.dtype,
                      side->dim, 1.0f, row);
      const char *why = "";
      const int64_t d = fc_quantize_row_refusal(side->cache_dtype, row,
                                                side->dim, &scales, &why);
      if (d >= 0)
        return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                       CALL ": %s_new[0, %lld, %lld, %lld] cannot be written "
                            "to the %s pages: %s",
                       name, (long long)t, (long long)h, (long long)d,
                       flashcpu_dtype_name(side->cache_dtype), why);
    }
  }
  return FLASHCPU_OK;
}

flashcpu_status flashcpu_kv_append(flashcpu_context *ctx,
                                   const flashcpu_tensor *k_new,
                                   const flashcpu_tensor *v_new,
                                   const int64_t *slot_mapping,
                                   const flashcpu_paged_kv *kv) {
  flashcpu_status status;
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  fc_byte_span k_cache, v_cache, k_span, v_span, scale_spans[4];
  if ((status = fc_check_paged_kv(ctx, CALL, kv, true, &k_cache, &v_cache,
                                  scale_spans)) ||
      (status = check_rows(ctx, k_new, "k_new", -1, kv->kv_heads, kv->head_dim,
                           &k_span)) ||
      (status = check_rows(ctx, v_new, "v_new", k_new->dims[1], kv->kv_heads,
                           kv->v_head_dim, &v_span)))
    return status;
  const int64_t tokens = k_new->dims[1];
  if (tokens == 0) {
    fc_clear_error(ctx);
    return FLASHCPU_OK;
  }
  if (!slot_mapping)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": slot_mapping is NULL");
  int64_t capacity;
  if (__builtin_mul_overflow(kv->num_pages, kv->page_size, &capacity))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   CALL ": num_pages * page_size overflows int64");
  const fc_byte_span slot_span = {(uintptr_t)slot_mapping,
                                  (uintptr_t)slot_mapping +
                                      (uintptr_t)tokens * sizeof(int64_t)};
  const fc_byte_span sources[3] = {k_span, v_span, slot_span};
  const char *source_names[3] = {"k_new", "v_new", "slot_mapping"};
  const fc_byte_span targets[6] = {k_cache,        v_cache,
                                   scale_spans[0], scale_spans[1],
                                   scale_spans[2], scale_spans[3]};
  const char *target_names[6] = {"the K pages",  "the V pages",
                                 "the K scales", "the K zero points",
                                 "the V scales", "the V zero points"};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 6; j++)
      if (fc_spans_overlap(sources[i], targets[j]))
        return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                       CALL ": %s overlaps %s in memory", source_names[i],
                       target_names[j]);
  if ((status = check_slots(ctx, slot_mapping, tokens, capacity)))
    return status;

  fc_append_problem a;
  memset(&a, 0, sizeof a);
  a.tokens = tokens;
  a.kv_heads = kv->kv_heads;
  a.page_size = kv->page_size;
  a.slots = slot_mapping;
  const flashcpu_tensor *sources_of[2] = {k_new, v_new};
  for (int s = 0; s < 2; s++) {
    fill_side(kv, s, sources_of[s], &a.sides[s]);
    if ((status =
             check_quantizable(ctx, &a.sides[s], s ? "v" : "k", slot_mapping,
                               tokens, kv->kv_heads, kv->page_size)))
      return status;
  }
  char reason[256];
  fc_kernel_env env = fc_context_kernel_env(ctx, reason, sizeof reason);
  if ((status = fc_kv_append_run(&env, &a)) != FLASHCPU_OK)
    return fc_fail(ctx, status, CALL ": %s", reason[0] ? reason : "failed");
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
