#include "kernels/append/kv_append.h"

#include <string.h>

#include "common/dtype_convert.h"
#include "kernels/kernel_support.h"

/* Tokens per tile: small steps (decode) run as one tile. */
enum { TOKENS_PER_TILE = 16 };

static size_t scratch_for_team(const void *opaque, int team_size) {
  const fc_append_problem *a = opaque;
  const int64_t dim =
      a->sides[0].dim > a->sides[1].dim ? a->sides[0].dim : a->sides[1].dim;
  return (size_t)team_size * (size_t)dim * sizeof(float) + 64;
}

typedef struct append_args {
  const fc_append_problem *a;
  const fc_row_to_f32_fn *row_to_f32;
} append_args;

char *fc_append_target(const fc_append_side *side, int64_t page, int64_t offset,
                       int64_t head, fc_row_scales_out *scales) {
  if (scales) {
    const int64_t at = page * side->scale_strides[0] +
                       offset * side->scale_strides[1] +
                       head * side->scale_strides[2];
    const int64_t size = (int64_t)flashcpu_dtype_size(side->scale_dtype);
    scales->scales = side->scales ? side->scales + at * size : NULL;
    scales->zeros = side->zeros ? side->zeros + at * size : NULL;
    scales->dtype = side->scale_dtype;
    scales->stride = side->scale_strides[3];
    scales->computed = side->scales_computed;
  }
  return side->cache + page * side->byte_strides[0] +
         offset * side->byte_strides[1] + head * side->byte_strides[2];
}

static void copy_row(const append_args *args, const fc_append_side *side,
                     int64_t t, int64_t head, int64_t page, int64_t offset,
                     float *row) {
  const char *source = fc_view_row(&side->source, 0, t, head);
  fc_row_scales_out scales;
  char *target = fc_append_target(side, page, offset, head, &scales);
  if (side->source.dtype == side->cache_dtype) { /* bits as they are */
    memcpy(target, source,
           (size_t)side->dim * flashcpu_dtype_size(side->cache_dtype));
    return;
  }
  args->row_to_f32[side->source.dtype](source, side->dim, 1.0f, row);
  if (fc_dtype_is_quantized(side->cache_dtype))
    fc_quantize_row(side->cache_dtype, row, side->dim, &scales, target);
  else
    fc_store_row(row, 1.0f, side->dim, side->cache_dtype, target);
}

/* Tile = TOKENS_PER_TILE tokens; the team's threads share their rows. */
static void append_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const append_args *args = opaque;
  const fc_append_problem *a = args->a;
  float *row = (float *)(((uintptr_t)team->scratch + 63) & ~(uintptr_t)63) +
               (size_t)team->rank * (size_t)(a->sides[0].dim > a->sides[1].dim
                                                 ? a->sides[0].dim
                                                 : a->sides[1].dim);
  const int64_t end = (tile + 1) * TOKENS_PER_TILE < a->tokens
                          ? (tile + 1) * TOKENS_PER_TILE
                          : a->tokens;
  int64_t turn = 0;
  for (int64_t t = tile * TOKENS_PER_TILE; t < end; t++) {
    const int64_t slot = a->slots[t];
    if (slot < 0) continue;
    for (int64_t head = 0; head < a->kv_heads; head++, turn++) {
      if (turn % team->size != team->rank) continue;
      for (int s = 0; s < 2; s++)
        copy_row(args, &a->sides[s], t, head, slot / a->page_size,
                 slot % a->page_size, row);
    }
  }
}

flashcpu_status fc_kv_append_run(const fc_kernel_env *env,
                                 const fc_append_problem *a) {
  flashcpu_status status = fc_kernel_reserve_scratch(env, scratch_for_team, a);
  if (status != FLASHCPU_OK) return status;
  append_args args = {a, env->row_to_f32};
  fc_launch launch = {append_tile, &args,
                      (a->tokens + TOKENS_PER_TILE - 1) / TOKENS_PER_TILE,
                      false, NULL};
  if (fc_runtime_launch(env->runtime, &launch) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory launching the append");
  return FLASHCPU_OK;
}
