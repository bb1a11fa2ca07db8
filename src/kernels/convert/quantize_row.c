#include "kernels/convert/quantize_row.h"

/* The largest finite value of each fp8 format. */
static float fp8_largest(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F8_E4M3 ? 448.0f : 57344.0f;
}

static float load_or(const char *data, flashcpu_dtype dtype, int64_t index,
                     float otherwise) {
  return data ? fc_scale_load(data, dtype, index) : otherwise;
}

int64_t fc_quantize_row_refusal(flashcpu_dtype dtype, const float *x,
                                int64_t count, const fc_row_scales_out *scales,
                                const char **why) {
  if (dtype == FLASHCPU_DTYPE_Q8_0 || scales->computed) return -1;
  const bool integer = dtype == FLASHCPU_DTYPE_I8 || dtype == FLASHCPU_DTYPE_U8;
  for (int64_t d = 0; d < count; d++) {
    const float scale =
        load_or(scales->scales, scales->dtype, d * scales->stride, 1.0f);
    if (!isfinite(scale) || scale <= 0.0f) {
      *why = "its scale is not finite and > 0";
      return d;
    }
    if (scales->zeros && !isfinite(fc_scale_load(scales->zeros, scales->dtype,
                                                 d * scales->stride))) {
      *why = "its zero point is not finite";
      return d;
    }
    if (integer && !isfinite(x[d])) {
      *why = "it is NaN or inf, which an I8 or U8 cache with given scales "
             "cannot hold";
      return d;
    }
  }
  return -1;
}

/* Stores value as the row's zero point and returns what was stored. */
static float store(char *data, flashcpu_dtype dtype, float value) {
  fc_scale_store(data, dtype, 0, value);
  return fc_scale_load(data, dtype, 0);
}

/* One scale per row: from the row's range, NaN where it holds NaN / inf;
 * exact in double, then stored as fc_scale_store_computed says (the
 * nearest value of the scales' dtype unless that would lose the row). */
static void compute_row_scale(flashcpu_dtype dtype, const float *x,
                              int64_t count, const fc_row_scales_out *out,
                              float *scale, float *zero) {
  float low = INFINITY, high = -INFINITY, largest = 0.0f;
  bool finite = true;
  for (int64_t d = 0; d < count; d++) {
    if (!isfinite(x[d])) finite = false;
    low = fminf(low, x[d]);
    high = fmaxf(high, x[d]);
    largest = fmaxf(largest, fabsf(x[d]));
  }
  double exact;
  *zero = 0.0f;
  if (!finite)
    exact = NAN;
  else if (dtype == FLASHCPU_DTYPE_I8)
    exact = (double)largest / 127.0;
  else if (dtype == FLASHCPU_DTYPE_U8) {
    exact = (double)(high - low) / 255.0;
    if (!(exact > 0.0)) exact = largest > 0.0f ? (double)largest / 255.0 : 1.0;
  } else
    exact = (double)largest / fp8_largest(dtype);
  *scale = out->scales ? fc_scale_store_computed(out->scales, out->dtype, exact,
                                                 fc_quant_scale_slack(dtype))
                       : 1.0f;
  if (dtype == FLASHCPU_DTYPE_U8 && out->zeros)
    *zero = store(out->zeros, out->dtype,
                  finite && *scale > 0.0f ? -low / *scale : NAN);
}

void fc_quantize_row(flashcpu_dtype dtype, const float *x, int64_t count,
                     const fc_row_scales_out *scales, char *row) {
  if (dtype == FLASHCPU_DTYPE_Q8_0) {
    for (int64_t d = 0; d < count; d += FC_Q8_0_BLOCK)
      fc_q8_0_encode_block(x + d, row + d / FC_Q8_0_BLOCK * FC_Q8_0_BYTES);
    return;
  }
  float scale = 1.0f, zero = 0.0f;
  if (scales->computed) {
    compute_row_scale(dtype, x, count, scales, &scale, &zero);
    /* A NaN or zero scale: the codes say nothing (the row reads NaN or 0). */
    if (!(scale > 0.0f) || !isfinite(scale) || zero != zero) {
      memset(row, 0, (size_t)count);
      return;
    }
  }
  for (int64_t d = 0; d < count; d++) {
    if (!scales->computed) {
      scale = load_or(scales->scales, scales->dtype, d * scales->stride, 1.0f);
      zero = load_or(scales->zeros, scales->dtype, d * scales->stride, 0.0f);
    }
    row[d] = (char)fc_quant_encode(dtype, x[d], scale, zero);
  }
}
