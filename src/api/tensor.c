/* Small helpers on the public value types. */
#include <string.h>

#include "flashcpu/flashcpu.h"

const char *flashcpu_dtype_name(flashcpu_dtype dtype) {
  switch (dtype) {
  case FLASHCPU_DTYPE_F32:
    return "f32";
  case FLASHCPU_DTYPE_F16:
    return "f16";
  case FLASHCPU_DTYPE_BF16:
    return "bf16";
  case FLASHCPU_DTYPE_I8:
    return "i8";
  case FLASHCPU_DTYPE_U8:
    return "u8";
  case FLASHCPU_DTYPE_F8_E4M3:
    return "f8_e4m3";
  case FLASHCPU_DTYPE_F8_E5M2:
    return "f8_e5m2";
  case FLASHCPU_DTYPE_Q8_0:
    return "q8_0";
  }
  return "unknown";
}

size_t flashcpu_dtype_size(flashcpu_dtype dtype) {
  switch (dtype) {
  case FLASHCPU_DTYPE_F32:
    return 4;
  case FLASHCPU_DTYPE_F16:
    return 2;
  case FLASHCPU_DTYPE_BF16:
    return 2;
  case FLASHCPU_DTYPE_I8:
  case FLASHCPU_DTYPE_U8:
  case FLASHCPU_DTYPE_F8_E4M3:
  case FLASHCPU_DTYPE_F8_E5M2:
    return 1;
  case FLASHCPU_DTYPE_Q8_0:
    return 34;
  }
  return 0;
}

int64_t flashcpu_dtype_block(flashcpu_dtype dtype) {
  if (dtype == FLASHCPU_DTYPE_Q8_0) return 32;
  return flashcpu_dtype_size(dtype) ? 1 : 0;
}

flashcpu_tensor flashcpu_tensor_bshd(void *data, flashcpu_dtype dtype,
                                     int64_t batch, int64_t seq, int64_t heads,
                                     int64_t head_dim) {
  flashcpu_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.dims[0] = batch;
  t.dims[1] = seq;
  t.dims[2] = heads;
  t.dims[3] = head_dim;
  t.strides[3] = 1;
  t.strides[2] = head_dim;
  t.strides[1] = heads * head_dim;
  t.strides[0] = seq * heads * head_dim;
  return t;
}

flashcpu_tensor flashcpu_tensor_bhsd(void *data, flashcpu_dtype dtype,
                                     int64_t batch, int64_t heads, int64_t seq,
                                     int64_t head_dim) {
  flashcpu_tensor t =
      flashcpu_tensor_bshd(data, dtype, batch, seq, heads, head_dim);
  t.strides[1] = head_dim;
  t.strides[2] = seq * head_dim;
  t.strides[0] = heads * seq * head_dim;
  return t;
}

void flashcpu_attention_params_init(flashcpu_attention_params *params) {
  if (!params) return;
  memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
  params->window_left = -1;
  params->window_right = -1;
}

void flashcpu_paged_kv_init(flashcpu_paged_kv *kv) {
  if (!kv) return;
  memset(kv, 0, sizeof *kv);
  kv->struct_size = sizeof *kv;
}

flashcpu_paged_kv flashcpu_paged_kv_nhd(void *k, void *v, flashcpu_dtype dtype,
                                        int64_t num_pages, int64_t page_size,
                                        int64_t kv_heads, int64_t head_dim) {
  flashcpu_paged_kv kv;
  flashcpu_paged_kv_init(&kv);
  kv.k = k;
  kv.v = v;
  kv.k_dtype = kv.v_dtype = dtype;
  kv.num_pages = num_pages;
  kv.page_size = page_size;
  kv.kv_heads = kv_heads;
  kv.head_dim = kv.v_head_dim = head_dim;
  kv.k_strides[0] = kv.v_strides[0] = page_size * kv_heads * head_dim;
  kv.k_strides[1] = kv.v_strides[1] = kv_heads * head_dim;
  kv.k_strides[2] = kv.v_strides[2] = head_dim;
  return kv;
}

flashcpu_paged_kv flashcpu_paged_kv_hnd(void *k, void *v, flashcpu_dtype dtype,
                                        int64_t num_pages, int64_t page_size,
                                        int64_t kv_heads, int64_t head_dim) {
  flashcpu_paged_kv kv = flashcpu_paged_kv_nhd(k, v, dtype, num_pages,
                                               page_size, kv_heads, head_dim);
  kv.k_strides[1] = kv.v_strides[1] = head_dim;
  kv.k_strides[2] = kv.v_strides[2] = page_size * head_dim;
  return kv;
}

void flashcpu_batch_init(flashcpu_batch *batch) {
  if (!batch) return;
  memset(batch, 0, sizeof *batch);
  batch->struct_size = sizeof *batch;
}
