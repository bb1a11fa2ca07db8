/* The output digest's paged serving step: two decode requests, a verify
 * request under a tree mask and a prefill chunk onto a cached prefix, in
 * one ragged batch over pages of 16 and of 1 in a shuffled order, with
 * bf16, f32 and i8 pages (i8 with per-token scales written by
 * flashcpu_kv_append). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output_digest.h"

enum { REQUESTS = 4, Q_HEADS = 8, KV_HEADS = 2, DIM = 64 };
static const int32_t cu_seqlens_q[REQUESTS + 1] = {0, 1, 2, 6, 30};
static const int32_t seq_lens_kv[REQUESTS] = {300, 37, 120, 88};
enum { ROWS = 30, VERIFY = 2, VERIFY_ROWS = 4 };

static int64_t pages_of(int64_t keys, int64_t page_size) {
  return (keys + page_size - 1) / page_size;
}

/* The step's plan (releases before 0.3.0 took no dtypes). */
static flashcpu_status
digest_plan(flashcpu_context *ctx, const flashcpu_batch *batch,
            flashcpu_dtype q_dtype, flashcpu_dtype out_dtype,
            const flashcpu_paged_kv *kv, flashcpu_plan **plan) {
#if FLASHCPU_VERSION >= 300
  return flashcpu_plan_create(ctx, batch, Q_HEADS, q_dtype, out_dtype, kv,
                              plan);
#else
  (void)q_dtype;
  (void)out_dtype;
  return flashcpu_plan_create(ctx, batch, Q_HEADS, kv, plan);
#endif
}

static int paged_step(flashcpu_context *ctx, int64_t page_size,
                      flashcpu_dtype cache_dtype) {
  digest_seed(2024 + (uint64_t)page_size);
  /* Each request's pages from a shuffled pool. */
  int64_t max_pages = 0, num_pages = 0;
  for (int r = 0; r < REQUESTS; r++) {
    const int64_t pages = pages_of(seq_lens_kv[r], page_size);
    num_pages += pages;
    if (pages > max_pages) max_pages = pages;
  }
  num_pages += 3; /* pages no request uses */
  int32_t *block_table = calloc((size_t)(REQUESTS * max_pages), 4);
  int64_t next = 0;
  for (int r = 0; r < REQUESTS; r++)
    for (int64_t i = 0; i < pages_of(seq_lens_kv[r], page_size); i++)
      block_table[r * max_pages + i] =
          (int32_t)((next++ * 7 + 3) % num_pages); /* 7 is prime to it */

  const size_t element = flashcpu_dtype_size(cache_dtype);
  const int64_t slots = num_pages * page_size;
  void *k_pages = calloc((size_t)(slots * KV_HEADS * DIM), element);
  void *v_pages = calloc((size_t)(slots * KV_HEADS * DIM), element);
  flashcpu_paged_kv kv = flashcpu_paged_kv_nhd(
      k_pages, v_pages, cache_dtype, num_pages, page_size, KV_HEADS, DIM);
  float *k_scales = NULL, *v_scales = NULL;
  flashcpu_kv_scales k_scale_view, v_scale_view;
  if (cache_dtype == FLASHCPU_DTYPE_I8) {
    k_scales = calloc((size_t)(slots * KV_HEADS), sizeof(float));
    v_scales = calloc((size_t)(slots * KV_HEADS), sizeof(float));
    const flashcpu_kv_scales per_token = {
        NULL, FLASHCPU_DTYPE_F32, {page_size * KV_HEADS, KV_HEADS, 1, 0}, NULL};
    k_scale_view = v_scale_view = per_token;
    k_scale_view.data = k_scales;
    v_scale_view.data = v_scales;
    kv.k_scales = &k_scale_view;
    kv.v_scales = &v_scale_view;
  }

  /* Every request's keys, appended in one call. */
  int64_t tokens = 0;
  for (int r = 0; r < REQUESTS; r++) tokens += seq_lens_kv[r];
  int64_t *slot_mapping = malloc((size_t)tokens * sizeof(int64_t));
  for (int r = 0, t = 0; r < REQUESTS; r++)
    for (int64_t j = 0; j < seq_lens_kv[r]; j++)
      slot_mapping[t++] =
          block_table[r * max_pages + j / page_size] * page_size +
          j % page_size;
  void *k_new = digest_fill(tokens * KV_HEADS * DIM, FLASHCPU_DTYPE_F32);
  void *v_new = digest_fill(tokens * KV_HEADS * DIM, FLASHCPU_DTYPE_F32);
  flashcpu_tensor tk =
      flashcpu_tensor_bshd(k_new, FLASHCPU_DTYPE_F32, 1, tokens, KV_HEADS, DIM);
  flashcpu_tensor tv =
      flashcpu_tensor_bshd(v_new, FLASHCPU_DTYPE_F32, 1, tokens, KV_HEADS, DIM);
  flashcpu_status status = flashcpu_kv_append(ctx, &tk, &tv, slot_mapping, &kv);

  /* The verify request's rows see the newest keys as a chain with its
   * second draft cut from the later ones. */
  uint64_t tree_bits[ROWS] = {0};
  int32_t tree_num_keys[REQUESTS] = {0, 0, VERIFY_ROWS, 0};
  for (int i = 0; i < VERIFY_ROWS; i++)
    tree_bits[cu_seqlens_q[VERIFY] + i] =
        ((2ull << i) - 1) & ~(i > 1 ? 2ull : 0);
  flashcpu_batch batch;
  flashcpu_batch_init(&batch);
  batch.num_requests = REQUESTS;
  batch.cu_seqlens_q = cu_seqlens_q;
  batch.seq_lens_kv = seq_lens_kv;
  batch.block_table = block_table;
  batch.block_table_stride = max_pages;
#if FLASHCPU_VERSION >= 300
  const flashcpu_tree_mask tree = {tree_bits, ROWS, VERIFY_ROWS, 1, 0};
  batch.tree_mask = &tree;
#else
  batch.tree_bits = tree_bits;
  batch.tree_row_stride = 1;
#endif
  batch.tree_num_keys = tree_num_keys;

  void *q = digest_fill(ROWS * Q_HEADS * DIM, FLASHCPU_DTYPE_BF16);
  float *out = calloc((size_t)(ROWS * Q_HEADS * DIM), sizeof(float));
  float *lse = calloc((size_t)(Q_HEADS * ROWS), sizeof(float));
  flashcpu_tensor tq =
      flashcpu_tensor_bshd(q, FLASHCPU_DTYPE_BF16, 1, ROWS, Q_HEADS, DIM);
  flashcpu_tensor to =
      flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, 1, ROWS, Q_HEADS, DIM);
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.flags = FLASHCPU_FLAG_CAUSAL;
  flashcpu_plan *plan = NULL;
  if (status == FLASHCPU_OK)
    status = digest_plan(ctx, &batch, FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F32,
                         &kv, &plan);
  if (status == FLASHCPU_OK)
    status = flashcpu_attention_paged(ctx, plan, &tq, &kv, &to, lse, &params);
  flashcpu_plan_destroy(plan);

  char name[64];
  snprintf(name, sizeof name, "paged-%s-page-%lld",
           flashcpu_dtype_name(cache_dtype), (long long)page_size);
  const int failed = digest_report(
      name, ctx, status, out, (size_t)(ROWS * Q_HEADS * DIM) * sizeof(float),
      lse, (size_t)(Q_HEADS * ROWS));
  free(block_table);
  free(k_pages);
  free(v_pages);
  free(k_scales);
  free(v_scales);
  free(slot_mapping);
  free(k_new);
  free(v_new);
  free(q);
  free(out);
  free(lse);
  return failed;
}

int digest_paged_cases(flashcpu_context *ctx) {
  static const flashcpu_dtype dtypes[] = {
      FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_I8};
  int failures = 0;
  for (int64_t page_size = 16; page_size >= 1; page_size -= 15)
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
      failures += paged_step(ctx, page_size, dtypes[d]);
  return failures;
}
