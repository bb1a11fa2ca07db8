#include "api/paged_check.h"

#include <string.h>

#include "api/errors.h"
#include "common/quant.h"

static const char *const page_dims[3] = {"page", "slot", "kv head"};

static flashcpu_status check_side(flashcpu_context *ctx, const char *call,
                                  const flashcpu_paged_kv *kv, const char *name,
                                  const void *data, flashcpu_dtype dtype,
                                  const int64_t *strides, int64_t dim,
                                  fc_byte_span *span) {
  if (!data && span)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: kv->%s is NULL", call,
                   name);
  if (!fc_dtype_is_float(dtype) && !fc_dtype_is_quantized(dtype))
    return fc_fail(ctx, FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                   "%s: kv->%s_dtype is %d; expected a flashcpu_dtype: F32 "
                   "(0), F16 (1), BF16 (2), I8 (3), U8 (4), F8_E4M3 (5), "
                   "F8_E5M2 (6) or Q8_0 (7)",
                   call, name, (int)dtype);
  for (int d = 0; d < 3; d++)
    if (strides[d] < 0)
      return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                     "%s: kv->%s_strides[%d] (%s) is %lld; strides must be "
                     "non-negative",
                     call, name, d, page_dims[d], (long long)strides[d]);
  if (dtype == FLASHCPU_DTYPE_Q8_0) {
    if (dim % FC_Q8_0_BLOCK != 0)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     "%s: kv->%s is Q8_0 with head_dim %lld; Q8_0 rows are "
                     "whole blocks of 32",
                     call, name, (long long)dim);
    for (int d = 0; d < 3; d++)
      if (strides[d] % FC_Q8_0_BLOCK != 0)
        return fc_fail(ctx, FLASHCPU_ERROR_BAD_LAYOUT,
                       "%s: kv->%s_strides[%d] (%s) is %lld; Q8_0 strides "
                       "are multiples of 32 elements (whole blocks)",
                       call, name, d, page_dims[d], (long long)strides[d]);
  }
  const int64_t dims[4] = {kv->num_pages, kv->page_size, kv->kv_heads, dim};
  const int64_t all_strides[4] = {strides[0], strides[1], strides[2], 1};
  /* Without data (a plan), the extent alone must fit. */
  fc_byte_span extent;
  if (!fc_quantized_span_of(span ? data : NULL, dtype, dims, all_strides, 4,
                            span ? span : &extent))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   "%s: kv->%s's pages reach past the int64 / address range",
                   call, name);
  return FLASHCPU_OK;
}

flashcpu_status fc_check_paged_kv(flashcpu_context *ctx, const char *call,
                                  const flashcpu_paged_kv *kv, bool with_data,
                                  fc_byte_span *k_span, fc_byte_span *v_span,
                                  fc_byte_span *scale_spans) {
  if (!kv)
    return fc_fail(ctx, FLASHCPU_ERROR_NULL_POINTER, "%s: kv is NULL", call);
  if (kv->struct_size != sizeof(flashcpu_paged_kv))
    return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   "%s: kv->struct_size is %zu, expected %zu (fill it with "
                   "flashcpu_paged_kv_init, flashcpu_paged_kv_nhd or "
                   "flashcpu_paged_kv_hnd)",
                   call, kv->struct_size, sizeof(flashcpu_paged_kv));
  const struct {
    int64_t value;
    const char *name;
  } geometry[] = {{kv->num_pages, "num_pages"},
                  {kv->page_size, "page_size"},
                  {kv->kv_heads, "kv_heads"},
                  {kv->head_dim, "head_dim"},
                  {kv->v_head_dim, "v_head_dim"}};
  for (size_t i = 0; i < sizeof geometry / sizeof geometry[0]; i++)
    if (geometry[i].value < 1)
      return fc_fail(ctx, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     "%s: kv->%s is %lld; it must be >= 1", call,
                     geometry[i].name, (long long)geometry[i].value);
  int64_t slots;
  if (__builtin_mul_overflow(kv->num_pages, kv->page_size, &slots))
    return fc_fail(ctx, FLASHCPU_ERROR_SIZE_OVERFLOW,
                   "%s: kv->num_pages * kv->page_size overflows int64", call);
  flashcpu_status status =
      check_side(ctx, call, kv, "k", kv->k, kv->k_dtype, kv->k_strides,
                 kv->head_dim, with_data ? k_span : NULL);
  if (status != FLASHCPU_OK) return status;
  if ((status =
           check_side(ctx, call, kv, "v", kv->v, kv->v_dtype, kv->v_strides,
                      kv->v_head_dim, with_data ? v_span : NULL)))
    return status;
  if (!with_data) return FLASHCPU_OK;
  const int64_t k_dims[4] = {kv->num_pages, kv->page_size, kv->kv_heads,
                             kv->head_dim};
  const int64_t v_dims[4] = {kv->num_pages, kv->page_size, kv->kv_heads,
                             kv->v_head_dim};
  fc_byte_span ignored[4];
  fc_byte_span *spans = scale_spans ? scale_spans : ignored;
  if ((status =
           fc_check_kv_scales(ctx, call, kv->k_scales, kv->k_dtype,
                              "kv->k_scales", k_dims, &spans[0], &spans[1])))
    return status;
  return fc_check_kv_scales(ctx, call, kv->v_scales, kv->v_dtype,
                            "kv->v_scales", v_dims, &spans[2], &spans[3]);
}

void fc_fill_paged_view(const flashcpu_paged_kv *kv, int which,
                        const int32_t *pages, const int64_t *page_rows,
                        fc_view *view) {
  const int64_t *strides = which ? kv->v_strides : kv->k_strides;
  memset(view, 0, sizeof *view);
  view->data = (const char *)(which ? kv->v : kv->k);
  view->dtype = which ? kv->v_dtype : kv->k_dtype;
  view->element_size = (int64_t)flashcpu_dtype_size(view->dtype);
  view->strides[0] = strides[0];
  view->strides[1] = strides[1];
  view->strides[2] = strides[2];
  view->strides[3] = 1;
  fc_view_set_storage(view);
  fc_fill_view_scales(which ? kv->v_scales : kv->k_scales, view);
  view->pages = pages;
  view->page_rows = page_rows;
  view->page_size = kv->page_size;
  view->page_shift = -1;
  if ((kv->page_size & (kv->page_size - 1)) == 0)
    for (int shift = 0; shift < 63; shift++)
      if ((INT64_C(1) << shift) == kv->page_size) view->page_shift = shift;
}
