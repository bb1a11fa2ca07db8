/* flashcpu_plan_create's checks of a step's batch: lengths, block table
 * (every entry a request uses) and tree masks. */
#include "api/batch_check.h"

#include <stdio.h>

#include "api/errors.h"

#define CALL "flashcpu_plan_create"

/* Pages a request of `keys` keys uses. */
static int64_t pages_of(int64_t keys, int64_t page_size) {
  return (keys + page_size - 1) / page_size;
}

/* The tree masks: the contiguous call's type over the T packed rows, and
 * each request's count of tree keys. */
static flashcpu_status check_trees(flashcpu_context *ctx,
                                   const flashcpu_batch *batch) {
  const flashcpu_tree_mask *tree = batch->tree_mask;
  if (!tree != !batch->tree_num_keys)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": batch->tree_mask and batch->tree_num_keys go "
                        "together: one is NULL, the other is not");
  if (!tree) return FLASHCPU_OK;
  const int64_t T = batch->cu_seqlens_q[batch->num_requests];
  if (!tree->bits)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": batch->tree_mask->bits is NULL");
  if (tree->num_rows < T || tree->batch_stride != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": batch->tree_mask has num_rows %lld and batch_stride "
                        "%lld; a step's mask covers its T = %lld packed rows "
                        "or more, with batch_stride 0",
                   (long long)tree->num_rows, (long long)tree->batch_stride,
                   (long long)T);
  if (tree->num_keys < 0 || tree->row_stride < (tree->num_keys + 63) / 64)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": batch->tree_mask has num_keys %lld and row_stride "
                        "%lld words; it needs num_keys >= 0 and row_stride >= "
                        "ceil(num_keys / 64)",
                   (long long)tree->num_keys, (long long)tree->row_stride);
  for (int64_t r = 0; r < batch->num_requests; r++) {
    const int32_t n = batch->tree_num_keys[r];
    if (n < 0 || n > batch->seq_lens_kv[r] || n > tree->num_keys)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL
                     ": batch->tree_num_keys[%lld] is %d; it must be in "
                     "[0, min(seq_lens_kv[%lld] = %d, tree_mask->num_keys = "
                     "%lld)]",
                     (long long)r, (int)n, (long long)r,
                     (int)batch->seq_lens_kv[r], (long long)tree->num_keys);
  }
  return FLASHCPU_OK;
}

flashcpu_status fc_check_batch(flashcpu_context *ctx,
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
  return check_trees(ctx, batch);
}
