/* Argument checking for flashcpu_attention: every malformed call gets a
 * status and a message naming the argument, and nothing is written. */
#include "api/check.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "api/errors.h"
#include "api/view_check.h"

#define CALL "flashcpu_attention"

static flashcpu_status check_shapes(flashcpu_context *ctx,
                                    const flashcpu_tensor *q,
                                    const flashcpu_tensor *k,
                                    const flashcpu_tensor *v,
                                    const flashcpu_tensor *out) {
  struct {
    const flashcpu_tensor *a, *b;
    int dim_a, dim_b;
    const char *what;
  } const rules[] = {
      {q, k, 0, 0, "k's batch must equal q's"},
      {q, v, 0, 0, "v's batch must equal q's"},
      {q, out, 0, 0, "out's batch must equal q's"},
      {k, v, 1, 1, "v's seq (kv rows) must equal k's"},
      {k, v, 2, 2, "v's heads must equal k's"},
      {q, k, 3, 3, "k's head_dim must equal q's"},
      {q, out, 1, 1, "out's seq must equal q's"},
      {q, out, 2, 2, "out's heads must equal q's"},
      {v, out, 3, 3, "out's head_dim must equal v's"},
  };
  for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
    int64_t a = rules[r].a->dims[rules[r].dim_a];
    int64_t b = rules[r].b->dims[rules[r].dim_b];
    if (a != b)
      return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                     CALL ": %s (got %lld, expected %lld)", rules[r].what,
                     (long long)b, (long long)a);
  }
  if (q->dims[2] % k->dims[2] != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                   CALL ": q heads (%lld) must be a multiple of k/v heads "
                        "(%lld) for GQA",
                   (long long)q->dims[2], (long long)k->dims[2]);
  return FLASHCPU_OK;
}

flashcpu_status fc_copy_params(flashcpu_context *ctx, const char *call,
                               const flashcpu_attention_params *params,
                               flashcpu_attention_params *copy) {
  flashcpu_attention_params_init(copy);
  if (!params) return FLASHCPU_OK;
  /* This version's layout, or 0.1.0's, which ends before the sinks. */
  const size_t v010 = offsetof(flashcpu_attention_params, sinks);
  if (params->struct_size != sizeof(flashcpu_attention_params) &&
      params->struct_size != v010)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: params->struct_size is %zu, expected %zu (or 0.1.0's "
                   "%zu; call flashcpu_attention_params_init first)",
                   call, params->struct_size, sizeof(flashcpu_attention_params),
                   v010);
  memcpy(copy, params, params->struct_size);
  copy->struct_size = sizeof *copy;
  return FLASHCPU_OK;
}

flashcpu_status
fc_check_common_params(flashcpu_context *ctx, const char *call,
                       const flashcpu_attention_params *params) {
  if (params->flags & ~FLASHCPU_FLAG_CAUSAL)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: params->flags has unknown bits 0x%x (known: "
                   "FLASHCPU_FLAG_CAUSAL = 0x1)",
                   call, (unsigned)(params->flags & ~FLASHCPU_FLAG_CAUSAL));
  if (!isfinite(params->scale))
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: params->scale is not finite", call);
  if (!isfinite(params->softcap) || params->softcap < 0.0f)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: params->softcap is %g; it must be 0 (off) or a "
                   "positive finite value",
                   call, (double)params->softcap);
  if (params->window_left < -1 || params->window_right < -1)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: window (%lld, %lld): each side must be -1 "
                   "(unbounded) or >= 0",
                   call, (long long)params->window_left,
                   (long long)params->window_right);
  return FLASHCPU_OK;
}

static flashcpu_status check_kv_lengths(flashcpu_context *ctx,
                                        const int64_t *kv_lengths,
                                        int64_t batch, int64_t capacity) {
  for (int64_t b = 0; b < batch; b++)
    if (kv_lengths[b] < 0 || kv_lengths[b] > capacity)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": kv_lengths[%lld] is %lld; it must be in [0, %lld] "
                          "(the rows k and v hold)",
                     (long long)b, (long long)kv_lengths[b],
                     (long long)capacity);
  return FLASHCPU_OK;
}

static flashcpu_status check_tree(flashcpu_context *ctx,
                                  const flashcpu_tree_mask *tree,
                                  const fc_problem *p, fc_byte_span *span) {
  if (!tree->bits)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": params->tree_mask->bits is NULL");
  if (tree->num_rows < p->q_len)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": the tree mask has %lld rows but q has %lld rows",
                   (long long)tree->num_rows, (long long)p->q_len);
  if (tree->num_keys < 1)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": tree_mask->num_keys is %lld; it must be >= 1",
                   (long long)tree->num_keys);
  for (int64_t b = 0; b < p->batch; b++)
    if (tree->num_keys > fc_problem_kv_length(p, b))
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": the tree mask covers %lld keys but batch %lld has "
                          "only %lld",
                     (long long)tree->num_keys, (long long)b,
                     (long long)fc_problem_kv_length(p, b));
  int64_t words = (tree->num_keys + 63) / 64;
  if (tree->row_stride < words)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": tree_mask->row_stride is %lld words; %lld keys need "
                        "at least %lld",
                   (long long)tree->row_stride, (long long)tree->num_keys,
                   (long long)words);
  if (tree->batch_stride < 0)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": tree_mask->batch_stride is %lld; it must be >= 0",
                   (long long)tree->batch_stride);
  int64_t dims[3] = {p->batch, p->q_len, words};
  int64_t strides[3] = {tree->batch_stride, tree->row_stride, 1};
  if (!fc_span_of(tree->bits, dims, strides, 3, 8, span))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   CALL ": the tree mask's strides reach past the int64 range");
  return FLASHCPU_OK;
}

flashcpu_status fc_check_additive(flashcpu_context *ctx, const char *call,
                                  const flashcpu_additive_mask *mask,
                                  const int64_t dims[4], fc_byte_span *span) {
  if (!mask->data)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER,
                   "%s: params->additive_mask->data is NULL", call);
  for (int d = 0; d < 4; d++)
    if (mask->strides[d] < 0)
      return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                     "%s: additive_mask->strides[%d] is %lld; strides must "
                     "be non-negative (0 broadcasts)",
                     call, d, (long long)mask->strides[d]);
  if (!fc_span_of(mask->data, dims, mask->strides, 4, 4, span))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   "%s: the additive mask's strides reach past the int64 "
                   "range",
                   call);
  return FLASHCPU_OK;
}

flashcpu_status fc_check_outputs_apart(flashcpu_context *ctx, const char *call,
                                       fc_byte_span out, fc_byte_span lse,
                                       const fc_byte_span *inputs,
                                       const char *const *names, int count) {
  for (int i = 0; i < count; i++) {
    if (fc_spans_overlap(out, inputs[i]))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     "%s: out overlaps %s in memory", call, names[i]);
    if (fc_spans_overlap(lse, inputs[i]))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     "%s: lse overlaps %s in memory", call, names[i]);
  }
  if (fc_spans_overlap(lse, out))
    return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                   "%s: lse overlaps out in memory", call);
  return FLASHCPU_OK;
}

flashcpu_status fc_check_variants(flashcpu_context *ctx, const char *call,
                                  const flashcpu_attention_params *params,
                                  fc_problem *problem, int64_t slope_batches,
                                  fc_byte_span *spans, int *count,
                                  const char **names) {
  if (params->sinks) {
    const flashcpu_dtype dtype = params->sinks_dtype;
    if (dtype != FLASHCPU_DTYPE_F32 && dtype != FLASHCPU_DTYPE_F16 &&
        dtype != FLASHCPU_DTYPE_BF16)
      return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                     "%s: params->sinks_dtype is %d; it must be f32, f16 or "
                     "bf16",
                     call, (int)dtype);
    problem->sinks = params->sinks;
    problem->sinks_dtype = dtype;
    spans->begin = (uintptr_t)params->sinks;
    spans->end =
        spans->begin + (uintptr_t)problem->q_heads * flashcpu_dtype_size(dtype);
    spans++;
    *names++ = "the sinks";
    ++*count;
  }
  if (params->alibi_slopes) {
    const int64_t stride = params->alibi_batch_stride;
    if (stride != 0 && stride < problem->q_heads)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     "%s: params->alibi_batch_stride is %lld; it must be 0 "
                     "(one [Hq] for every batch) or at least Hq = %lld",
                     call, (long long)stride, (long long)problem->q_heads);
    const int64_t batches = stride ? slope_batches : 1;
    for (int64_t b = 0; b < batches; b++)
      for (int64_t h = 0; h < problem->q_heads; h++)
        if (!isfinite(params->alibi_slopes[b * stride + h]))
          return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                         "%s: alibi_slopes[%lld] (batch %lld, head %lld) is "
                         "not finite",
                         call, (long long)(b * stride + h), (long long)b,
                         (long long)h);
    problem->alibi = params->alibi_slopes;
    problem->alibi_batch_stride = stride;
    spans->begin = (uintptr_t)params->alibi_slopes;
    spans->end =
        spans->begin +
        (uintptr_t)((batches - 1) * stride + problem->q_heads) * sizeof(float);
    spans++;
    *names++ = "the ALiBi slopes";
    ++*count;
  }
  if (params->query_offsets) {
    /* Bounded so that a position or an ALiBi distance cannot overflow. */
    const int64_t bound = INT64_C(1) << 62;
    for (int64_t b = 0; b < slope_batches; b++)
      if (params->query_offsets[b] < -bound || params->query_offsets[b] > bound)
        return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                       "%s: query_offsets[%lld] is %lld; it must be in "
                       "[-2^62, 2^62]",
                       call, (long long)b, (long long)params->query_offsets[b]);
    problem->query_offsets = params->query_offsets;
    spans->begin = (uintptr_t)params->query_offsets;
    spans->end = spans->begin + (uintptr_t)slope_batches * sizeof(int64_t);
    *names = "query_offsets";
    ++*count;
  }
  return FLASHCPU_OK;
}

flashcpu_status fc_check_attention(
    flashcpu_context *ctx, const flashcpu_tensor *q, const flashcpu_tensor *k,
    const flashcpu_tensor *v, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params, fc_problem *problem) {
  flashcpu_status status;
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");

  flashcpu_attention_params copy;
  if ((status = fc_copy_params(ctx, CALL, params, &copy)) != FLASHCPU_OK)
    return status;
  params = &copy;
  if ((status = fc_check_common_params(ctx, CALL, params)) != FLASHCPU_OK)
    return status;

  fc_byte_span q_span, k_span, v_span, out_span;
  if ((status = fc_check_tensor(ctx, CALL, q, "q", 1, &q_span)) ||
      (status = fc_check_kv_tensor(ctx, CALL, k, "k", 0, &k_span)) ||
      (status = fc_check_kv_tensor(ctx, CALL, v, "v", 0, &v_span)) ||
      (status = fc_check_tensor(ctx, CALL, out, "out", 1, &out_span)) ||
      (status = check_shapes(ctx, q, k, v, out)))
    return status;
  if (!fc_output_rows_distinct(out))
    return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                   CALL ": out's strides make different rows share memory");

  memset(problem, 0, sizeof *problem);
  problem->batch = q->dims[0];
  problem->q_len = q->dims[1];
  problem->q_heads = q->dims[2];
  problem->head_dim = q->dims[3];
  problem->kv_capacity = k->dims[1];
  problem->kv_heads = k->dims[2];
  problem->v_head_dim = v->dims[3];
  problem->group = problem->q_heads / problem->kv_heads;
  fc_fill_view(q, &problem->q);
  fc_fill_view(k, &problem->k);
  fc_fill_view(v, &problem->v);
  fc_fill_view(out, &problem->out);
  problem->scale = params->scale != 0.0f
                       ? params->scale
                       : (float)(1.0 / sqrt((double)problem->head_dim));
  problem->softcap = params->softcap;
  problem->causal = (params->flags & FLASHCPU_FLAG_CAUSAL) != 0;
  problem->window_left = params->window_left;
  problem->window_right = params->window_right;
  problem->kv_lengths = params->kv_lengths;
  problem->tree = params->tree_mask;
  problem->additive = params->additive_mask;
  problem->lse = lse;
  problem->lse_batch_stride = problem->q_heads * problem->q_len;
  problem->lse_head_stride = problem->q_len;

  fc_byte_span inputs[13] = {q_span, k_span, v_span};
  const char *input_names[13] = {"q", "k", "v"};
  int input_count = 3;
  const flashcpu_tensor *kv_of[2] = {k, v};
  const flashcpu_kv_scales *scales_of[2] = {params->k_scales, params->v_scales};
  static const char *const scale_names[2][2] = {
      {"params->k_scales", "k's zero points"},
      {"params->v_scales", "v's zero points"}};
  for (int s = 0; s < 2; s++) {
    if ((status = fc_check_kv_scales(
             ctx, CALL, scales_of[s], kv_of[s]->dtype, scale_names[s][0],
             kv_of[s]->dims, &inputs[input_count], &inputs[input_count + 1])))
      return status;
    input_names[input_count] = scale_names[s][0];
    input_names[input_count + 1] = scale_names[s][1];
    input_count += 2;
    fc_fill_view_scales(scales_of[s], s ? &problem->v : &problem->k);
  }
  if ((status = fc_check_variants(ctx, CALL, params, problem, problem->batch,
                                  &inputs[input_count], &input_count,
                                  &input_names[input_count])))
    return status;
  if (params->kv_lengths) {
    if ((status = check_kv_lengths(ctx, params->kv_lengths, problem->batch,
                                   problem->kv_capacity)))
      return status;
    inputs[input_count].begin = (uintptr_t)params->kv_lengths;
    inputs[input_count].end = (uintptr_t)(params->kv_lengths + problem->batch);
    input_names[input_count++] = "kv_lengths";
  }
  if (params->tree_mask) {
    if ((status =
             check_tree(ctx, params->tree_mask, problem, &inputs[input_count])))
      return status;
    input_names[input_count++] = "the tree mask";
  }
  if (params->additive_mask) {
    const int64_t dims[4] = {problem->batch, problem->q_heads, problem->q_len,
                             problem->kv_capacity};
    if ((status = fc_check_additive(ctx, CALL, params->additive_mask, dims,
                                    &inputs[input_count])))
      return status;
    input_names[input_count++] = "the additive mask";
  }

  fc_byte_span lse_span = {0, 0};
  if (lse) {
    int64_t count, bytes;
    if (__builtin_mul_overflow(problem->batch, problem->q_heads, &count) ||
        __builtin_mul_overflow(count, problem->q_len, &count) ||
        __builtin_mul_overflow(count, (int64_t)sizeof(float), &bytes))
      return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                     CALL ": lse's size overflows int64");
    lse_span.begin = (uintptr_t)lse;
    lse_span.end = (uintptr_t)lse + (uintptr_t)bytes;
    if (lse_span.end < lse_span.begin)
      return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                     CALL ": lse reaches past the address range");
  }
  return fc_check_outputs_apart(ctx, CALL, out_span, lse_span, inputs,
                                input_names, input_count);
}
