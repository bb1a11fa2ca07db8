/* flashcpu_quantize and flashcpu_dequantize: check the views and scales,
 * refuse what read scales cannot hold before writing anything, then
 * convert (kernels/convert/quantize_tensor). */
#include <stdbool.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/errors.h"
#include "api/view_check.h"
#include "common/dtype_convert.h"
#include "kernels/convert/quantize_tensor.h"

/* Whether a tensor holds no element (a dim of 0: here only seq may be). */
static bool is_empty(const flashcpu_tensor *t) {
  return t->dims[0] == 0 || t->dims[1] == 0 || t->dims[2] == 0 ||
         t->dims[3] == 0;
}

static flashcpu_status
check_pair(flashcpu_context *ctx, const char *call, const flashcpu_tensor *src,
           const flashcpu_tensor *dst, const flashcpu_tensor *quantized,
           const char *quantized_name, const flashcpu_kv_scales *scales,
           fc_byte_span spans[4]) {
  flashcpu_status status;
  const bool quantize = quantized == dst;
  if ((status = quantize ? fc_check_tensor(ctx, call, src, "src", 0, &spans[0])
                         : fc_check_kv_tensor(ctx, call, src, "src", 0,
                                              &spans[0])) ||
      (status = quantize
                    ? fc_check_kv_tensor(ctx, call, dst, "dst", 0, &spans[1])
                    : fc_check_tensor(ctx, call, dst, "dst", 0, &spans[1])))
    return status;
  if (!fc_dtype_is_quantized(quantized->dtype))
    return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                   "%s: %s is %s; it must be quantized (I8, U8, F8_E4M3, "
                   "F8_E5M2 or Q8_0)",
                   call, quantized_name, flashcpu_dtype_name(quantized->dtype));
  for (int d = 0; d < 4; d++)
    if (src->dims[d] != dst->dims[d])
      return fc_fail(ctx, FLASHCPU_ERROR_SHAPE_MISMATCH,
                     "%s: dst->dims[%d] is %lld but src's is %lld", call, d,
                     (long long)dst->dims[d], (long long)src->dims[d]);
  /* An empty dst has no rows to share (numpy's strides for one repeat). */
  if (!is_empty(dst) && !fc_output_rows_distinct(dst))
    return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                   "%s: dst's strides make different rows share memory", call);
  if ((status = fc_check_kv_scales(ctx, call, scales, quantized->dtype,
                                   quantize ? "dst_scales" : "src_scales",
                                   quantized->dims, &spans[2], &spans[3])))
    return status;
  /* spans: src, dst, scales, zero points. Quantizing writes dst and the
   * scales (reading src); dequantizing writes dst (reading the rest). What
   * is written must not overlap what is read, nor dst the scales. */
  static const char *const names[4] = {"src", "dst", "the scales",
                                       "the zero points"};
  static const int quantize_pairs[5][2] = {
      {1, 0}, {2, 0}, {3, 0}, {1, 2}, {1, 3}};
  static const int dequantize_pairs[3][2] = {{1, 0}, {1, 2}, {1, 3}};
  const int(*pairs)[2] = quantize ? quantize_pairs : dequantize_pairs;
  const int count = quantize ? 5 : 3;
  for (int p = 0; p < count; p++)
    if (fc_spans_overlap(spans[pairs[p][0]], spans[pairs[p][1]]))
      return fc_fail(ctx, FLASHCPU_ERROR_OVERLAP,
                     "%s: %s overlaps %s in memory", call, names[pairs[p][0]],
                     names[pairs[p][1]]);
  return FLASHCPU_OK;
}

/* Read scales must hold every value of src (checked row by row). */
static flashcpu_status check_refusals(flashcpu_context *ctx, const char *call,
                                      const fc_quantize_problem *q) {
  if (q->scales_computed || q->target.dtype == FLASHCPU_DTYPE_Q8_0)
    return FLASHCPU_OK;
  const int64_t D = q->dims[3];
  if (fc_runtime_reserve_call_workspace(&ctx->runtime,
                                        (size_t)D * sizeof(float)) != 0)
    return fc_fail(ctx, FLASHCPU_ERROR_OUT_OF_MEMORY,
                   "%s: out of memory checking src", call);
  float *row = ctx->runtime.call_workspace;
  for (int64_t b = 0; b < q->dims[0]; b++)
    for (int64_t s = 0; s < q->dims[1]; s++)
      for (int64_t h = 0; h < q->dims[2]; h++) {
        fc_load_row_f32(fc_view_row(&q->source, b, s, h), q->source.dtype, D,
                        1.0f, row);
        const fc_row_scales_out scales =
            fc_quantize_row_scales(&q->target, b, s, h, false);
        const char *why = "";
        const int64_t d =
            fc_quantize_row_refusal(q->target.dtype, row, D, &scales, &why);
        if (d >= 0)
          return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                         "%s: src[%lld, %lld, %lld, %lld] cannot be "
                         "quantized to %s: %s",
                         call, (long long)b, (long long)s, (long long)h,
                         (long long)d, flashcpu_dtype_name(q->target.dtype),
                         why);
      }
  return FLASHCPU_OK;
}

static flashcpu_status convert(flashcpu_context *ctx, const char *call,
                               const flashcpu_tensor *src,
                               const flashcpu_tensor *dst,
                               const flashcpu_kv_scales *scales,
                               bool quantize) {
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER, "%s: ctx is NULL", call);
  fc_byte_span spans[4];
  flashcpu_status status = check_pair(ctx, call, src, dst, quantize ? dst : src,
                                      quantize ? "dst" : "src", scales, spans);
  if (status != FLASHCPU_OK) return status;
  fc_quantize_problem q;
  memset(&q, 0, sizeof q);
  memcpy(q.dims, src->dims, sizeof q.dims);
  fc_fill_view(src, &q.source);
  fc_fill_view(dst, &q.target);
  fc_fill_view_scales(scales, quantize ? &q.target : &q.source);
  q.quantize = quantize;
  q.scales_computed = quantize && fc_scales_computed(scales);
  if (quantize && q.scales_computed && dst->dtype == FLASHCPU_DTYPE_U8 &&
      !scales->zero_points)
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: dst is U8 with per-token scales, which need "
                   "dst_scales->zero_points",
                   call);
  if (is_empty(src)) { /* valid, and nothing to do */
    fc_clear_error(ctx);
    return FLASHCPU_OK;
  }
  if (quantize && (status = check_refusals(ctx, call, &q))) return status;
  char reason[256];
  fc_kernel_env env = fc_context_kernel_env(ctx, reason, sizeof reason);
  if ((status = fc_quantize_run(&env, &q)) != FLASHCPU_OK)
    return fc_fail(ctx, status, "%s: %s", call, reason[0] ? reason : "failed");
  fc_clear_error(ctx);
  return FLASHCPU_OK;
}

flashcpu_status flashcpu_quantize(flashcpu_context *ctx,
                                  const flashcpu_tensor *src,
                                  const flashcpu_tensor *dst,
                                  const flashcpu_kv_scales *dst_scales) {
  return convert(ctx, "flashcpu_quantize", src, dst, dst_scales, true);
}

flashcpu_status flashcpu_dequantize(flashcpu_context *ctx,
                                    const flashcpu_tensor *src,
                                    const flashcpu_kv_scales *src_scales,
                                    const flashcpu_tensor *dst) {
  return convert(ctx, "flashcpu_dequantize", src, dst, src_scales, false);
}
