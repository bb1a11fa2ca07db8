/* One chunk's state: flashcpu_attention on the chunk's K/V rows alone, the
 * queries placed after it with query_offsets, the masks cut to its keys.
 * What a chunk computes depends on its place in the whole sequence only,
 * never on which rank holds it: that is what makes the bytes independent
 * of the number of ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

#define CALL "flashcpu_mpi_attention"

bool fcm_chunk_visible(const fcm_call *call, int64_t b, int64_t begin,
                       int64_t end) {
  /* Rows' ranges grow with the row: row 0's window start bounds them all;
   * the last row sees up to the last key whatever the mask. */
  const int64_t first_position = call->totals[b] - call->rows;
  const int64_t left = call->params.window_left;
  int64_t first_visible = 0;
  if (left >= 0 && left < first_position) first_visible = first_position - left;
  return end > first_visible && begin < end;
}

void fcm_owned_chunks(const fcm_call *call, int r, int64_t b, int64_t *first,
                      int64_t *count) {
  const int64_t n = call->lengths[(int64_t)r * call->batch + b];
  const int64_t start = call->starts[(int64_t)r * call->batch + b];
  *first = start / call->chunk_keys;
  *count = n > 0 ? (n + call->chunk_keys - 1) / call->chunk_keys : 0;
}

/* A view's data moved by `elements` elements (Q8_0: whole blocks). */
static void *advance(void *data, flashcpu_dtype dtype, int64_t elements) {
  const int64_t bytes = elements / flashcpu_dtype_block(dtype) *
                        (int64_t)flashcpu_dtype_size(dtype);
  return (char *)data + bytes;
}

/* Rows [row, row + count) of batch b of a K or V view, as batch 0. */
static flashcpu_tensor kv_rows(const flashcpu_tensor *t, int64_t b, int64_t row,
                               int64_t count) {
  flashcpu_tensor rows = *t;
  rows.data =
      advance(t->data, t->dtype, b * t->strides[0] + row * t->strides[1]);
  rows.dims[0] = 1;
  rows.dims[1] = count;
  return rows;
}

static flashcpu_kv_scales scale_rows(const flashcpu_kv_scales *scales,
                                     int64_t b, int64_t row) {
  flashcpu_kv_scales rows = *scales;
  const int64_t at = b * scales->strides[0] + row * scales->strides[1];
  const int64_t size = (int64_t)flashcpu_dtype_size(scales->dtype);
  if (rows.data) rows.data = (char *)rows.data + at * size;
  if (rows.zero_points) rows.zero_points = (char *)rows.zero_points + at * size;
  return rows;
}

static int tree_bit(const flashcpu_tree_mask *tree, int64_t b, int64_t row,
                    int64_t bit) {
  const uint64_t word =
      tree->bits[b * tree->batch_stride + row * tree->row_stride + bit / 64];
  return (int)((word >> (bit % 64)) & 1u);
}

/* The part of the sequence's tree mask over keys [begin, end) of request
 * b, which is a run of the chunk's newest keys: *mask points into *bits
 * (allocated), or mask->num_keys is 0 where the chunk has no tree keys. */
static flashcpu_status cut_tree(const fcm_call *call, int64_t b, int64_t begin,
                                int64_t end, flashcpu_tree_mask *mask,
                                uint64_t **bits) {
  const flashcpu_tree_mask *tree = call->params.tree_mask;
  memset(mask, 0, sizeof *mask);
  *bits = NULL;
  const int64_t tree_begin = call->totals[b] - tree->num_keys;
  if (end <= tree_begin) return FLASHCPU_OK;
  const int64_t first = begin > tree_begin ? begin : tree_begin;
  const int64_t keys = end - first, words = (keys + 63) / 64;
  *bits = calloc((size_t)(call->rows * words), sizeof(uint64_t));
  if (!*bits)
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY,
                    CALL ": out of memory for a chunk's tree mask");
  for (int64_t i = 0; i < call->rows; i++)
    for (int64_t t = 0; t < keys; t++)
      if (tree_bit(tree, b, i, first - tree_begin + t))
        (*bits)[i * words + t / 64] |= UINT64_C(1) << (t % 64);
  mask->bits = *bits;
  mask->num_rows = call->rows;
  mask->num_keys = keys;
  mask->row_stride = words;
  mask->batch_stride = 0;
  return FLASHCPU_OK;
}

flashcpu_status fcm_compute_chunk(const fcm_call *call, int64_t b, int64_t c,
                                  float *record) {
  const flashcpu_attention_params *given = &call->params;
  const int64_t total = call->totals[b];
  const int64_t begin = c * call->chunk_keys;
  const int64_t end =
      begin + call->chunk_keys < total ? begin + call->chunk_keys : total;
  const int64_t row =
      begin - call->starts[(int64_t)call->rank * call->batch + b];

  flashcpu_tensor q = *call->q;
  q.data = advance(q.data, q.dtype, b * q.strides[0]);
  q.dims[0] = 1;
  const flashcpu_tensor out =
      flashcpu_tensor_bshd(record, FLASHCPU_DTYPE_F32, 1, call->rows,
                           call->q_heads, call->v_head_dim);
  float *lse = record + call->rows * call->q_heads * call->v_head_dim;

  flashcpu_attention_params params = *given;
  const int64_t offset = total - end;
  params.kv_lengths = NULL;
  params.query_offsets = &offset;
  params.sinks = NULL; /* the sink is a state of its own */
  params.tree_mask = NULL;
  flashcpu_additive_mask additive;
  if (given->additive_mask) {
    additive = *given->additive_mask;
    additive.data += b * additive.strides[0] + row * additive.strides[3];
    params.additive_mask = &additive;
  }
  if (given->alibi_slopes && given->alibi_batch_stride)
    params.alibi_slopes = given->alibi_slopes + b * given->alibi_batch_stride;
  flashcpu_tree_mask tree;
  uint64_t *tree_bits = NULL;
  if (given->tree_mask) {
    const flashcpu_status status =
        cut_tree(call, b, begin, end, &tree, &tree_bits);
    if (status != FLASHCPU_OK) return status;
  }
  const flashcpu_tree_mask *chunk_tree =
      given->tree_mask && tree.num_keys ? &tree : NULL;
  flashcpu_status status;
  if (call->paged) {
    status = fcm_paged_chunk(call, b, row, end - begin, &q, &out, lse, &params,
                             chunk_tree);
  } else {
    const flashcpu_tensor k = kv_rows(call->k, b, row, end - begin);
    const flashcpu_tensor v = kv_rows(call->v, b, row, end - begin);
    flashcpu_kv_scales k_scales, v_scales;
    if (given->k_scales) {
      k_scales = scale_rows(given->k_scales, b, row);
      params.k_scales = &k_scales;
    }
    if (given->v_scales) {
      v_scales = scale_rows(given->v_scales, b, row);
      params.v_scales = &v_scales;
    }
    params.tree_mask = chunk_tree;
    status = flashcpu_attention(call->ctx, &q, &k, &v, &out, lse, &params);
  }
  free(tree_bits);
  if (status != FLASHCPU_OK)
    return fcm_fail(status, CALL ": request %lld, keys [%lld, %lld): %s",
                    (long long)b, (long long)begin, (long long)end,
                    flashcpu_last_error(call->ctx));
  return FLASHCPU_OK;
}

/* IEEE binary16 to float, exactly. */
static float f16_to_f32(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float magnitude;
  if (exponent == 0)
    magnitude = ldexpf((float)mantissa, -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = ldexpf((float)(mantissa | 0x400), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

static float sink_of(const fcm_call *call, int64_t h) {
  const void *sinks = call->params.sinks;
  switch (call->params.sinks_dtype) {
  case FLASHCPU_DTYPE_F16: {
    uint16_t bits;
    memcpy(&bits, (const char *)sinks + 2 * h, sizeof bits);
    return f16_to_f32(bits);
  }
  case FLASHCPU_DTYPE_BF16: {
    uint16_t half;
    memcpy(&half, (const char *)sinks + 2 * h, sizeof half);
    const uint32_t bits = (uint32_t)half << 16;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
  }
  default: {
    float x;
    memcpy(&x, (const char *)sinks + 4 * h, sizeof x);
    return x;
  }
  }
}

void fcm_sink_lse(const fcm_call *call, float *lse) {
  for (int64_t h = 0; h < call->q_heads; h++) {
    const float sink = sink_of(call, h);
    for (int64_t i = 0; i < call->rows; i++) lse[h * call->rows + i] = sink;
  }
}
