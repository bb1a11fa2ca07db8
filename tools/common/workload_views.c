/* A built workload's views: the tensors, pages and batch of a layer, its
 * plan, one timed call, and a request's contiguous view for the oracle. */
#include <stdlib.h>
#include <string.h>

#include "common/workload.h"

void toolkit_workload_tensors(const toolkit_workload *workload, int layer,
                              flashcpu_tensor *q, flashcpu_tensor *k,
                              flashcpu_tensor *v, flashcpu_tensor *out) {
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  /* Serve's decode requests are one row each. */
  const int64_t rows = spec->phase == TOOLKIT_PHASE_SERVE ? 1 : spec->q_rows;
  layer %= workload->layer_count;
  *q = flashcpu_tensor_bshd(workload->q, spec->q_dtype, spec->batch, rows,
                            preset->q_heads, preset->head_dim);
  *k = flashcpu_tensor_bshd(workload->k_layers[layer], spec->kv_dtype,
                            spec->batch, spec->kv_rows, preset->kv_heads,
                            preset->head_dim);
  *v = flashcpu_tensor_bshd(workload->v_layers[layer], spec->kv_dtype,
                            spec->batch, spec->kv_rows, preset->kv_heads,
                            preset->head_dim);
  *out = flashcpu_tensor_bshd(workload->out, spec->out_dtype, spec->batch, rows,
                              preset->q_heads, preset->head_dim);
}

/* Packed row `row` of a [1, T, heads, D] buffer. */
static void *packed_row(void *data, flashcpu_dtype dtype, int64_t row,
                        int64_t heads, int64_t head_dim) {
  return (char *)data +
         (size_t)(row * heads * head_dim) * flashcpu_dtype_size(dtype);
}

void toolkit_workload_chunk_tensors(const toolkit_workload *workload, int layer,
                                    flashcpu_tensor *q, flashcpu_tensor *k,
                                    flashcpu_tensor *v, flashcpu_tensor *out) {
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  const int64_t Hq = preset->q_heads, D = preset->head_dim;
  const int64_t first = workload->cu_seqlens_q[spec->batch];
  const int64_t keys = spec->prefix_rows + spec->q_rows;
  layer %= workload->layer_count;
  *q =
      flashcpu_tensor_bshd(packed_row(workload->q, spec->q_dtype, first, Hq, D),
                           spec->q_dtype, 1, spec->q_rows, Hq, D);
  *k = flashcpu_tensor_bshd(workload->chunk_k_layers[layer], spec->kv_dtype, 1,
                            keys, preset->kv_heads, D);
  *v = flashcpu_tensor_bshd(workload->chunk_v_layers[layer], spec->kv_dtype, 1,
                            keys, preset->kv_heads, D);
  *out = flashcpu_tensor_bshd(
      packed_row(workload->out, spec->out_dtype, first, Hq, D), spec->out_dtype,
      1, spec->q_rows, Hq, D);
}

void toolkit_workload_paged(const toolkit_workload *workload, int layer,
                            flashcpu_tensor *q, flashcpu_paged_kv *kv,
                            flashcpu_tensor *out, flashcpu_batch *batch) {
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  layer %= workload->layer_count;
  *q = flashcpu_tensor_bshd(workload->q, spec->q_dtype, 1, workload->num_tokens,
                            preset->q_heads, preset->head_dim);
  *out = flashcpu_tensor_bshd(workload->out, spec->out_dtype, 1,
                              workload->num_tokens, preset->q_heads,
                              preset->head_dim);
  *kv = flashcpu_paged_kv_nhd(
      workload->k_layers[layer], workload->v_layers[layer], spec->kv_dtype,
      workload->num_pages, spec->page_size, preset->kv_heads, preset->head_dim);
  if (workload->k_scales) {
    kv->k_scales = &workload->k_scales[layer];
    kv->v_scales = &workload->v_scales[layer];
  }
  if (!batch) return;
  flashcpu_batch_init(batch);
  batch->num_requests = workload->num_requests;
  batch->cu_seqlens_q = workload->cu_seqlens_q;
  batch->seq_lens_kv = workload->seq_lens_kv;
  batch->block_table = workload->block_table;
  batch->block_table_stride = workload->block_table_stride;
  if (workload->tree_num_keys) {
    batch->tree_mask = workload->tree;
    batch->tree_num_keys = workload->tree_num_keys;
  }
}

flashcpu_status toolkit_workload_plan(flashcpu_context *ctx,
                                      const toolkit_workload *workload,
                                      flashcpu_plan **plan) {
  *plan = NULL;
  if (workload->spec.page_size <= 0) return FLASHCPU_OK;
  flashcpu_tensor q, out;
  flashcpu_paged_kv kv;
  flashcpu_batch batch;
  toolkit_workload_paged(workload, 0, &q, &kv, &out, &batch);
  return flashcpu_plan_create(ctx, &batch, workload->spec.preset->q_heads,
                              q.dtype, out.dtype, &kv, plan);
}

flashcpu_status toolkit_workload_call(flashcpu_context *ctx,
                                      const toolkit_workload *workload,
                                      const flashcpu_plan *plan, int layer) {
  flashcpu_tensor q, k, v, out;
  if (workload->spec.page_size > 0) {
    flashcpu_paged_kv kv;
    toolkit_workload_paged(workload, layer, &q, &kv, &out, NULL);
    return flashcpu_attention_paged(ctx, plan, &q, &kv, &out, NULL,
                                    &workload->params);
  }
  toolkit_workload_tensors(workload, layer, &q, &k, &v, &out);
  flashcpu_attention_params params = workload->params;
  if (workload->k_scales) {
    params.k_scales = &workload->k_scales[layer % workload->layer_count];
    params.v_scales = &workload->v_scales[layer % workload->layer_count];
  }
  flashcpu_status status =
      flashcpu_attention(ctx, &q, &k, &v, &out, NULL, &params);
  if (status != FLASHCPU_OK || workload->spec.phase != TOOLKIT_PHASE_SERVE)
    return status;
  toolkit_workload_chunk_tensors(workload, layer, &q, &k, &v, &out);
  return flashcpu_attention(ctx, &q, &k, &v, &out, NULL,
                            &workload->chunk_params);
}

/* Copies request r's keys [0, S_r) out of its pages: [S_r, Hkv, D]. */
static void gather_pages(const toolkit_workload *workload, const void *pool,
                         int64_t request, void *copy) {
  const int64_t page_size = workload->spec.page_size;
  const size_t row_bytes = toolkit_kv_row_bytes(&workload->spec);
  const int32_t *pages =
      workload->block_table + request * workload->block_table_stride;
  for (int64_t j = 0; j < workload->seq_lens_kv[request]; j++) {
    const size_t slot = (size_t)pages[j / page_size] * (size_t)page_size +
                        (size_t)(j % page_size);
    memcpy((char *)copy + (size_t)j * row_bytes,
           (const char *)pool + slot * row_bytes, row_bytes);
  }
}

int toolkit_workload_request_view(const toolkit_workload *workload, int layer,
                                  int64_t request, toolkit_request_view *view) {
  memset(view, 0, sizeof *view);
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  const int64_t Hq = preset->q_heads, Hkv = preset->kv_heads;
  const int64_t D = preset->head_dim;
  const int64_t first = workload->cu_seqlens_q[request];
  const int64_t rows = workload->cu_seqlens_q[request + 1] - first;
  const int64_t keys = workload->seq_lens_kv[request];
  const size_t row_bytes = toolkit_kv_row_bytes(spec);
  layer %= workload->layer_count;
  view->q =
      flashcpu_tensor_bshd(packed_row(workload->q, spec->q_dtype, first, Hq, D),
                           spec->q_dtype, 1, rows, Hq, D);
  view->out = flashcpu_tensor_bshd(
      packed_row(workload->out, spec->out_dtype, first, Hq, D), spec->out_dtype,
      1, rows, Hq, D);
  const void *k, *v;
  /* Per-token scales of the request: where its rows' scales start. */
  const float *scales[4] = {NULL, NULL, NULL, NULL};
  const size_t n = workload->scale_floats;
  const bool per_token = n > 1;
  if (spec->page_size > 0) {
    const size_t bytes = (size_t)(keys > 0 ? keys : 1) * row_bytes;
    const size_t scale_bytes =
        per_token ? (size_t)(keys > 0 ? keys : 1) * (size_t)Hkv * sizeof(float)
                  : 0;
    view->gathered = malloc(2 * bytes + 4 * scale_bytes);
    if (!view->gathered) return -1;
    gather_pages(workload, workload->k_layers[layer], request, view->gathered);
    gather_pages(workload, workload->v_layers[layer], request,
                 (char *)view->gathered + bytes);
    k = view->gathered;
    v = (char *)view->gathered + bytes;
    if (per_token) { /* the scales of the request's tokens, in order */
      const int32_t *pages =
          workload->block_table + request * workload->block_table_stride;
      for (int a = 0; a < 4; a++) {
        float *to = (float *)((char *)view->gathered + 2 * bytes +
                              (size_t)a * scale_bytes);
        const float *from = workload->scale_layers[layer] + (size_t)a * n;
        for (int64_t j = 0; j < keys; j++)
          memcpy(to + j * Hkv,
                 from + ((size_t)pages[j / spec->page_size] *
                             (size_t)spec->page_size +
                         (size_t)(j % spec->page_size)) *
                            (size_t)Hkv,
                 (size_t)Hkv * sizeof(float));
        scales[a] = to;
      }
    }
  } else if (spec->phase == TOOLKIT_PHASE_SERVE && request == spec->batch) {
    k = workload->chunk_k_layers[layer];
    v = workload->chunk_v_layers[layer];
  } else {
    const size_t offset = (size_t)(request * spec->kv_rows) * row_bytes;
    k = (const char *)workload->k_layers[layer] + offset;
    v = (const char *)workload->v_layers[layer] + offset;
    for (int a = 0; per_token && a < 4; a++)
      scales[a] = workload->scale_layers[layer] + (size_t)a * n +
                  (size_t)(request * spec->kv_rows * Hkv);
  }
  if (workload->k_scales) { /* strides of one request's rows */
    view->k_scales = workload->k_scales[layer];
    view->v_scales = workload->v_scales[layer];
    if (per_token) {
      view->k_scales.data = (void *)scales[0];
      view->v_scales.data = (void *)scales[1];
      view->k_scales.strides[0] = view->v_scales.strides[0] = 0;
      if (view->k_scales.zero_points) {
        view->k_scales.zero_points = (void *)scales[2];
        view->v_scales.zero_points = (void *)scales[3];
      }
    }
  }
  view->k = flashcpu_tensor_bshd((void *)k, spec->kv_dtype, 1, keys, Hkv, D);
  view->v = flashcpu_tensor_bshd((void *)v, spec->kv_dtype, 1, keys, Hkv, D);
  view->params = workload->chunk_params; /* the masks, no kv lengths */
  if (workload->k_scales) {
    view->params.k_scales = &view->k_scales;
    view->params.v_scales = &view->v_scales;
  }
  if (workload->tree_num_keys) {
    view->tree.bits = workload->tree_bits + first * workload->tree_row_stride;
    view->tree.num_rows = rows;
    view->tree.num_keys = workload->tree_num_keys[request];
    view->tree.row_stride = workload->tree_row_stride;
    view->tree.batch_stride = 0;
    view->params.tree_mask = &view->tree;
  }
  return 0;
}

void toolkit_request_view_free(toolkit_request_view *view) {
  free(view->gathered);
  memset(view, 0, sizeof *view);
}
