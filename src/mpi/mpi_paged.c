/* flashcpu_mpi_attention_paged's own parts: checking a rank's pages and
 * block table, and one chunk through flashcpu_attention_paged. A chunk is
 * whole pages (chunk_keys is a multiple of the page size), so it is a run
 * of the request's block-table entries: a plan of one request over them.
 * The paged path writes the contiguous path's bytes for the same problem,
 * so a paged call gives the bytes of the contiguous call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

#define CALL "flashcpu_mpi_attention_paged"

flashcpu_status fcm_check_paged(fcm_call *call) {
  const flashcpu_paged_kv *kv = call->paged;
  const flashcpu_attention_params *p = &call->params;
  if (!kv->k || !kv->v)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER,
                    CALL ": kv, kv->k or kv->v is NULL");
  if (!flashcpu_dtype_size(kv->k_dtype) || !flashcpu_dtype_size(kv->v_dtype))
    return fcm_fail(FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                    CALL ": kv's dtypes (%d, %d) are not flashcpu's",
                    (int)kv->k_dtype, (int)kv->v_dtype);
  call->kv_heads = kv->kv_heads;
  call->v_head_dim = kv->v_head_dim;
  call->k_dtype = kv->k_dtype;
  call->v_dtype = kv->v_dtype;
  if (kv->kv_heads < 1 || kv->v_head_dim < 1 || kv->page_size < 1 ||
      kv->num_pages < 0 || kv->head_dim != call->head_dim ||
      call->q_heads % kv->kv_heads != 0)
    return fcm_fail(FLASHCPU_ERROR_SHAPE_MISMATCH,
                    CALL ": the cache (kv_heads %lld, head_dim %lld, "
                         "v_head_dim %lld, page_size %lld, num_pages %lld) "
                         "does not fit q's %lld heads of %lld",
                    (long long)kv->kv_heads, (long long)kv->head_dim,
                    (long long)kv->v_head_dim, (long long)kv->page_size,
                    (long long)kv->num_pages, (long long)call->q_heads,
                    (long long)call->head_dim);
  if (call->chunk_keys > INT32_MAX || call->rows > INT32_MAX)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": chunk_keys and q's rows must fit the int32 "
                         "lengths of a paged batch");
  if (call->chunk_keys % kv->page_size != 0)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": chunk_keys %lld is not a multiple of the page "
                         "size %lld (a chunk must be whole pages)",
                    (long long)call->chunk_keys, (long long)kv->page_size);
  if (p->k_scales || p->v_scales)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": params->k_scales and v_scales must be NULL (the "
                         "cache's kv->k_scales and v_scales apply)");
  if (!p->kv_lengths)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER,
                    CALL ": params->kv_lengths is NULL (a paged call needs "
                         "this rank's keys per request)");
  if (call->block_table_stride < 0)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": block_table_stride is negative");
  for (int64_t b = 0; b < call->batch; b++) {
    const int64_t keys = p->kv_lengths[b];
    const int64_t pages = keys / kv->page_size + (keys % kv->page_size != 0);
    if (keys < 0 || pages > call->block_table_stride)
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": kv_lengths[%lld] is %lld; it must be in [0, "
                           "block_table_stride * page_size = %lld]",
                      (long long)b, (long long)keys,
                      (long long)(call->block_table_stride * kv->page_size));
    if (keys > 0 && !call->block_table)
      return fcm_fail(FLASHCPU_ERROR_NULL_POINTER,
                      CALL ": block_table is NULL but request %lld has keys",
                      (long long)b);
  }
  return FLASHCPU_OK;
}

/* Bytes from data to one past the last element of a pool of pages. */
static uint64_t pool_bytes(const int64_t strides[3], int64_t num_pages,
                           int64_t page_size, int64_t heads, int64_t dim,
                           flashcpu_dtype dtype) {
  if (num_pages < 1) return 0;
  const uint64_t last = (uint64_t)(num_pages - 1) * (uint64_t)strides[0] +
                        (uint64_t)(page_size - 1) * (uint64_t)strides[1] +
                        (uint64_t)(heads - 1) * (uint64_t)strides[2] +
                        (uint64_t)dim;
  const uint64_t block = (uint64_t)flashcpu_dtype_block(dtype);
  return (last + block - 1) / block * (uint64_t)flashcpu_dtype_size(dtype);
}

void fcm_paged_extents(const fcm_call *call, uint64_t *k_bytes,
                       uint64_t *v_bytes) {
  const flashcpu_paged_kv *kv = call->paged;
  *k_bytes = pool_bytes(kv->k_strides, kv->num_pages, kv->page_size,
                        kv->kv_heads, kv->head_dim, kv->k_dtype);
  *v_bytes = pool_bytes(kv->v_strides, kv->num_pages, kv->page_size,
                        kv->kv_heads, kv->v_head_dim, kv->v_dtype);
}

flashcpu_status fcm_paged_chunk(const fcm_call *call, int64_t b, int64_t row,
                                int64_t keys, const flashcpu_tensor *q,
                                const flashcpu_tensor *out, float *lse,
                                flashcpu_attention_params *params,
                                const flashcpu_tree_mask *tree) {
  const int64_t page_size = call->paged->page_size;
  const int32_t cu_seqlens[2] = {0, (int32_t)call->rows};
  const int32_t lengths[1] = {(int32_t)keys};
  const int32_t tree_keys[1] = {tree ? (int32_t)tree->num_keys : 0};
  flashcpu_batch batch;
  flashcpu_batch_init(&batch);
  batch.num_requests = 1;
  batch.cu_seqlens_q = cu_seqlens;
  batch.seq_lens_kv = lengths;
  batch.block_table =
      call->block_table + b * call->block_table_stride + row / page_size;
  batch.block_table_stride = keys / page_size + (keys % page_size != 0);
  flashcpu_tree_mask packed; /* the batch's tree over its packed rows */
  if (tree) {
    packed = *tree;
    packed.batch_stride = 0;
    batch.tree_mask = &packed;
    batch.tree_num_keys = tree_keys;
  }
  flashcpu_plan *plan = NULL;
  flashcpu_status status =
      flashcpu_plan_create(call->ctx, &batch, call->q_heads, q->dtype,
                           out->dtype, call->paged, &plan);
  if (status != FLASHCPU_OK) return status;
  params->tree_mask = NULL; /* the plan's */
  status = flashcpu_attention_paged(call->ctx, plan, q, call->paged, out, lse,
                                    params);
  flashcpu_plan_destroy(plan);
  return status;
}
