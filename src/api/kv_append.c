/* flashcpu_kv_append: check the new rows, the slots and the cache, then
 * write (kernels/append). Nothing is written unless every check passes. */
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/paged_check.h"
#include "kernels/append/kv_append.h"

#define CALL "flashcpu_kv_append"

static flashcpu_status check_rows(flashcpu_context *ctx,
                                  const flashcpu_tensor *t, const char *name,
                                  int64_t tokens, int64_t heads, int64_t dim,
                                  fc_byte_span *span) {
  flashcpu_status status = fc_check_tensor(ctx, CALL, t, name, 0, span);
  if (status != FLASHCPU_OK) return status;
  const int64_t expected[4] = {1, tokens < 0 ? t->dims[1] : tokens, heads,
                               dim};
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

flashcpu_status flashcpu_kv_append(flashcpu_context *ctx,
                                   const flashcpu_tensor *k_new,
                                   const flashcpu_tensor *v_new,
                                   const int64_t *slot_mapping,
                                   const flashcpu_paged_kv *kv) {
  flashcpu_status status;
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  fc_byte_span k_cache, v_cache, k_span, v_span;
  if ((status = fc_check_paged_kv(ctx, CALL, kv, true, &k_cache, &v_cache)) ||
      (status = check_rows(ctx, k_new, "k_new", -1, kv->kv_heads,
                           kv->head_dim, &k_span)) ||
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
  const fc_byte_span slot_span = {
      (uintptr_t)slot_mapping,
      (uintptr_t)slot_mapping + (uintptr_t)tokens * sizeof(int64_t)};
  const fc_byte_span sources[3] = {k_span, v_span, slot_span};
  const char *source_names[3] = {"k_new", "v_new", "slot_mapping"};
  for (int i = 0; i < 3; i++) {
    if (fc_spans_overlap(sources[i], k_cache))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     CALL ": %s overlaps the K pages in memory",
                     source_names[i]);
    if (fc_spans_overlap(sources[i], v_cache))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     CALL ": %s overlaps the V pages in memory",
                     source_names[i]);
  }
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
    fc_append_side *side = &a.sides[s];
    fc_fill_view(sources_of[s], &side->source);
    side->cache = s ? kv->v : kv->k;
    side->cache_dtype = s ? kv->v_dtype : kv->k_dtype;
    memcpy(side->strides, s ? kv->v_strides : kv->k_strides,
           sizeof side->strides);
    side->dim = s ? kv->v_head_dim : kv->head_dim;
  }
  char reason[256];
  fc_kernel_env env = fc_context_kernel_env(ctx, reason, sizeof reason);
  if ((status = fc_kv_append_run(&env, &a)) != FLASHCPU_OK)
    return fc_fail(ctx, status, CALL ": %s", reason[0] ? reason : "failed");
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}
