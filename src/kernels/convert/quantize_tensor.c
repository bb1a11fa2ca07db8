#include "kernels/convert/quantize_tensor.h"

#include "common/dtype_convert.h"
#include "kernels/kernel_support.h"

/* Rows per tile. */
enum { ROWS_PER_TILE = 64 };

fc_row_scales_out fc_quantize_row_scales(const fc_view *view, int64_t b,
                                         int64_t s, int64_t h, bool computed) {
  const fc_row_scales read = fc_view_row_scales(view, b, s, h);
  fc_row_scales_out out = {(char *)read.scales, (char *)read.zeros, read.dtype,
                           read.stride, computed};
  return out;
}

typedef struct quantize_args {
  const fc_quantize_problem *q;
  const fc_row_to_f32_fn *row_to_f32;
  fc_dequant_row_fn dequant_row;
} quantize_args;

static size_t scratch_for_team(const void *opaque, int team_size) {
  const quantize_args *args = opaque;
  return (size_t)team_size * (size_t)args->q->dims[3] * sizeof(float) + 64;
}

static void quantize_tile(void *opaque, int64_t tile,
                          const fc_team_view *team) {
  const quantize_args *args = opaque;
  const fc_quantize_problem *q = args->q;
  const int64_t D = q->dims[3];
  float *row = (float *)(((uintptr_t)team->scratch + 63) & ~(uintptr_t)63) +
               (size_t)team->rank * (size_t)D;
  const int64_t rows = q->dims[0] * q->dims[1] * q->dims[2];
  const int64_t end =
      (tile + 1) * ROWS_PER_TILE < rows ? (tile + 1) * ROWS_PER_TILE : rows;
  for (int64_t r = tile * ROWS_PER_TILE + team->rank; r < end;
       r += team->size) {
    const int64_t h = r % q->dims[2], s = r / q->dims[2] % q->dims[1],
                  b = r / (q->dims[2] * q->dims[1]);
    const char *source = fc_view_row(&q->source, b, s, h);
    char *target = (char *)fc_view_row(&q->target, b, s, h);
    if (q->quantize) {
      args->row_to_f32[q->source.dtype](source, D, 1.0f, row);
      const fc_row_scales_out scales =
          fc_quantize_row_scales(&q->target, b, s, h, q->scales_computed);
      fc_quantize_row(q->target.dtype, row, D, &scales, target);
    } else {
      fc_kv_row_to_f32(args->row_to_f32, args->dequant_row, &q->source, source,
                       b, s, h, D, row);
      fc_store_row(row, 1.0f, D, q->target.dtype, target);
    }
  }
}

flashcpu_status fc_quantize_run(const fc_kernel_env *env,
                                const fc_quantize_problem *q) {
  quantize_args args = {q, env->row_to_f32, env->dequant_row};
  flashcpu_status status =
      fc_kernel_reserve_scratch(env, scratch_for_team, &args);
  if (status != FLASHCPU_OK) return status;
  const int64_t rows = q->dims[0] * q->dims[1] * q->dims[2];
  fc_launch launch = {quantize_tile, &args,
                      (rows + ROWS_PER_TILE - 1) / ROWS_PER_TILE, false, NULL};
  if (fc_runtime_launch(env->runtime, &launch) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory launching the conversion");
  return FLASHCPU_OK;
}
