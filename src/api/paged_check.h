/* Checks of the paged API's arguments that more than one call makes: the
 * paged cache view, and its internal form. */
#ifndef FLASHCPU_API_PAGED_CHECK_H
#define FLASHCPU_API_PAGED_CHECK_H

#include <stdbool.h>

#include "api/view_check.h"
#include "common/problem.h"
#include "flashcpu/flashcpu.h"

/* A paged cache view: non-NULL, its geometry >= 1, num_pages * page_size
 * within int64, its dtypes and strides, and extents within the address
 * range. With with_data also its pointers and scales, and the bytes its K
 * and V pages span, and (scale_spans, unless NULL) its K scales, K zero
 * points, V scales and V zero points (empty where none), for overlap
 * checks. A plan checks without data: what later calls would refuse for
 * the description alone is refused when the plan is made. */
flashcpu_status fc_check_paged_kv(flashcpu_context *ctx, const char *call,
                                  const flashcpu_paged_kv *kv, bool with_data,
                                  fc_byte_span *k_span, fc_byte_span *v_span,
                                  fc_byte_span *scale_spans);

/* The internal view of K (which 0) or V (which 1) of a checked cache, its
 * rows found through pages and page_rows. */
void fc_fill_paged_view(const flashcpu_paged_kv *kv, int which,
                        const int32_t *pages, const int64_t *page_rows,
                        fc_view *view);

#endif
