/* The float64 oracle: attention exactly as include/flashcpu/flashcpu.h
 * documents it, one output row at a time. Deliberately naive: it
 * materialises the row's scores, decides every key's visibility from the
 * header's formulas directly (no tiles, no ranges, no online softmax) and
 * shares no code with the library. */
#include "oracle.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* IEEE binary16 -> double, exact. */
static double half_to_double(uint16_t bits) {
  int sign = (bits >> 15) & 1;
  int exponent = (bits >> 10) & 0x1f;
  int mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0x1f)
    magnitude = mantissa ? NAN : INFINITY;
  else if (exponent == 0)
    magnitude = ldexp((double)mantissa, -24);
  else
    magnitude = ldexp((double)(mantissa | 0x400), exponent - 25);
  return sign ? -magnitude : magnitude;
}

/* bfloat16 -> double, exact: the top half of a binary32. */
static double bfloat16_to_double(uint16_t bits) {
  uint32_t wide = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &wide, sizeof value);
  return (double)value;
}

/* Element `index` of a plain f32, f16 or bf16 array as double. */
static double load_scalar(const void *data, flashcpu_dtype dtype,
                          int64_t index) {
  const char *bytes = (const char *)data;
  switch (dtype) {
  case FLASHCPU_DTYPE_F32: {
    float value;
    memcpy(&value, bytes + index * 4, sizeof value);
    return (double)value;
  }
  case FLASHCPU_DTYPE_F16: {
    uint16_t bits;
    memcpy(&bits, bytes + index * 2, sizeof bits);
    return half_to_double(bits);
  }
  case FLASHCPU_DTYPE_BF16: {
    uint16_t bits;
    memcpy(&bits, bytes + index * 2, sizeof bits);
    return bfloat16_to_double(bits);
  }
  default:
    return NAN; /* quantized dtypes: see dequantized() */
  }
}

/* An fp8 code with `mantissa_bits` and exponent bias `bias`: E4M3 (3, 7,
 * no inf, NaN at all ones) or E5M2 (2, 15, inf and NaN as IEEE). */
static double decode_fp8(uint8_t code, int mantissa_bits, int bias) {
  const int exponent_bits = 7 - mantissa_bits;
  const int exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = code & ((1 << mantissa_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int top = (1 << exponent_bits) - 1;
  if (mantissa_bits == 3 && exponent == top && mantissa == 7) return NAN;
  if (mantissa_bits == 2 && exponent == top)
    return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0)
    return sign * ldexp((double)mantissa, 1 - bias - mantissa_bits);
  return sign *
         ldexp(1.0 + ldexp((double)mantissa, -mantissa_bits), exponent - bias);
}

double flashcpu_oracle_load_quantized(const flashcpu_tensor *t,
                                      const flashcpu_kv_scales *scales,
                                      int64_t b, int64_t s, int64_t h,
                                      int64_t d) {
  const int64_t element =
      b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + d;
  const unsigned char *bytes = (const unsigned char *)t->data;
  if (t->dtype == FLASHCPU_DTYPE_Q8_0) { /* 34-byte blocks of 32 */
    const unsigned char *block = bytes + element / 32 * 34;
    uint16_t bits;
    memcpy(&bits, block, sizeof bits);
    /* d * code in f32: the product of an f16 and an int8 is exact in
     * double, and rounds once. */
    return (double)(float)(half_to_double(bits) *
                           (double)(int8_t)block[2 + element % 32]);
  }
  const uint8_t code = bytes[element];
  double value;
  switch (t->dtype) {
  case FLASHCPU_DTYPE_I8:
    value = (double)(int8_t)code;
    break;
  case FLASHCPU_DTYPE_U8:
    value = (double)code;
    break;
  case FLASHCPU_DTYPE_F8_E4M3:
    value = decode_fp8(code, 3, 7);
    break;
  default:
    value = decode_fp8(code, 2, 15);
    break;
  }
  if (!scales) return value;
  const int64_t at = b * scales->strides[0] + s * scales->strides[1] +
                     h * scales->strides[2] + d * scales->strides[3];
  /* (code - zero) * scale, each step rounded to f32 as defined. */
  float x = (float)value;
  if (scales->zero_points)
    x = x - (float)load_scalar(scales->zero_points, scales->dtype, at);
  return (double)(x * (float)load_scalar(scales->data, scales->dtype, at));
}

double flashcpu_oracle_load(const flashcpu_tensor *t, int64_t b, int64_t s,
                            int64_t h, int64_t d) {
  if (t->dtype >= FLASHCPU_DTYPE_I8 && t->dtype <= FLASHCPU_DTYPE_Q8_0)
    return flashcpu_oracle_load_quantized(t, NULL, b, s, h, d);
  return load_scalar(t->data, t->dtype,
                     b * t->strides[0] + s * t->strides[1] + h * t->strides[2] +
                         d * t->strides[3]);
}

/* Whether causal, window and tree masks let query row i see key j, given the
 * batch's kv length. The additive mask is handled with the score. */
static bool structurally_visible(const flashcpu_attention_params *params,
                                 int64_t b, int64_t i, int64_t j, int64_t q_len,
                                 int64_t kv_length) {
  int64_t position = i + (kv_length - q_len); /* bottom-right aligned */
  if ((params->flags & FLASHCPU_FLAG_CAUSAL) && j > position) return false;
  /* p - left <= j <= p + right, written as differences so that windows up
   * to INT64_MAX cannot overflow. */
  if (params->window_left >= 0 && position - j > params->window_left)
    return false;
  if (params->window_right >= 0 && j - position > params->window_right)
    return false;
  const flashcpu_tree_mask *tree = params->tree_mask;
  if (tree) {
    int64_t tree_begin = kv_length - tree->num_keys;
    if (j >= tree_begin) {
      int64_t bit = j - tree_begin;
      uint64_t word =
          tree->bits[b * tree->batch_stride + i * tree->row_stride + bit / 64];
      if (((word >> (bit % 64)) & 1u) == 0) return false;
    }
  }
  return true;
}

/* Whether the caller's params struct reaches the end of a field added in a
 * later version: a struct of an earlier version's size leaves it unset. */
#define PARAMS_HAVE(params, field)                                             \
  ((params)->struct_size >=                                                    \
   offsetof(flashcpu_attention_params, field) + sizeof((params)->field))

/* The documented defaults, spelled out here rather than taken from
 * flashcpu_attention_params_init: the oracle does not link the library. */
static flashcpu_attention_params default_params(void) {
  flashcpu_attention_params defaults;
  memset(&defaults, 0, sizeof defaults);
  defaults.struct_size = sizeof defaults;
  defaults.window_left = -1;
  defaults.window_right = -1;
  return defaults;
}

/* One (batch, kv head)'s keys and values as doubles, plus per-row scratch. */
typedef struct oracle_head {
  const flashcpu_attention_params *params;
  int64_t b, h, kv_head, q_len, head_dim, v_head_dim, kv_length;
  double scale, cap;
  bool has_sink;
  double sink;    /* the head's sink logit, when has_sink */
  double slope;   /* ALiBi slope of (b, h); 0 without ALiBi */
  double *keys;   /* [kv_length][head_dim] */
  double *values; /* [kv_length][v_head_dim] */
  double *q_row;  /* [head_dim] */
  double *scores; /* [kv_length] */
  bool *visible;  /* [kv_length] */
} oracle_head;

static void free_head(oracle_head *head) {
  free(head->keys);
  free(head->values);
  free(head->q_row);
  free(head->scores);
  free(head->visible);
}

/* Converts the keys and values query head h reads. -1 when out of memory. */
static int load_head(const flashcpu_tensor *k, const flashcpu_tensor *v,
                     const flashcpu_tensor *q,
                     const flashcpu_attention_params *params, int64_t b,
                     int64_t h, oracle_head *head) {
  memset(head, 0, sizeof *head);
  head->params = params;
  head->b = b;
  head->h = h;
  head->q_len = q->dims[1];
  head->head_dim = q->dims[3];
  head->v_head_dim = v->dims[3];
  head->kv_length = params->kv_lengths ? params->kv_lengths[b] : k->dims[1];
  head->kv_head = h / (q->dims[2] / k->dims[2]);
  head->scale = params->scale != 0.0f ? (double)params->scale
                                      : 1.0 / sqrt((double)head->head_dim);
  head->cap = (double)params->softcap;
  if (PARAMS_HAVE(params, sinks_dtype) && params->sinks) {
    head->has_sink = true;
    head->sink = load_scalar(params->sinks, params->sinks_dtype, h);
  }
  if (PARAMS_HAVE(params, alibi_batch_stride) && params->alibi_slopes)
    head->slope =
        (double)params->alibi_slopes[b * params->alibi_batch_stride + h];
  size_t rows = head->kv_length > 0 ? (size_t)head->kv_length : 1;
  head->keys = malloc(rows * (size_t)head->head_dim * sizeof(double));
  head->values = malloc(rows * (size_t)head->v_head_dim * sizeof(double));
  head->q_row = malloc((size_t)head->head_dim * sizeof(double));
  head->scores = malloc(rows * sizeof(double));
  head->visible = malloc(rows * sizeof(bool));
  if (!head->keys || !head->values || !head->q_row || !head->scores ||
      !head->visible) {
    free_head(head);
    return -1;
  }
  const bool scaled = PARAMS_HAVE(params, v_scales);
  const flashcpu_kv_scales *k_scales = scaled ? params->k_scales : NULL;
  const flashcpu_kv_scales *v_scales = scaled ? params->v_scales : NULL;
  for (int64_t j = 0; j < head->kv_length; j++) {
    for (int64_t d = 0; d < head->head_dim; d++)
      head->keys[j * head->head_dim + d] =
          k_scales ? flashcpu_oracle_load_quantized(k, k_scales, b, j,
                                                    head->kv_head, d)
                   : flashcpu_oracle_load(k, b, j, head->kv_head, d);
    for (int64_t d = 0; d < head->v_head_dim; d++)
      head->values[j * head->v_head_dim + d] =
          v_scales ? flashcpu_oracle_load_quantized(v, v_scales, b, j,
                                                    head->kv_head, d)
                   : flashcpu_oracle_load(v, b, j, head->kv_head, d);
  }
  return 0;
}

/* Query row i of the head: softmax(scores) V over the visible keys. */
static void attend_row(const flashcpu_tensor *q, oracle_head *head, int64_t i,
                       double *out_row, double *lse) {
  const flashcpu_attention_params *params = head->params;
  const flashcpu_additive_mask *additive = params->additive_mask;
  const int64_t b = head->b, h = head->h, D = head->head_dim,
                Dv = head->v_head_dim;
  double *scores = head->scores;
  bool *visible = head->visible;

  for (int64_t d = 0; d < Dv; d++) out_row[d] = 0.0;
  *lse = -INFINITY;
  for (int64_t d = 0; d < D; d++)
    head->q_row[d] = flashcpu_oracle_load(q, b, i, h, d);

  double max_score = -INFINITY;
  bool any_visible = false, any_nan = false;
  for (int64_t j = 0; j < head->kv_length; j++) {
    visible[j] =
        structurally_visible(params, b, i, j, head->q_len, head->kv_length);
    if (!visible[j]) continue;
    double dot = 0.0;
    for (int64_t d = 0; d < D; d++)
      dot += head->q_row[d] * head->keys[j * D + d];
    double score = dot * head->scale;
    if (head->cap > 0.0) score = head->cap * tanh(score / head->cap);
    /* ALiBi: -slope * |p - j|, after the softcap, beside the additive mask. */
    const int64_t position = i + (head->kv_length - head->q_len);
    const int64_t distance = position > j ? position - j : j - position;
    score -= head->slope * (double)distance;
    if (additive) {
      double added =
          (double)additive
              ->data[b * additive->strides[0] + h * additive->strides[1] +
                     i * additive->strides[2] + j * additive->strides[3]];
      /* -inf is the additive mask saying "hidden": a mask decision, taken
       * whatever the score is. */
      if (added == -INFINITY) {
        visible[j] = false;
        continue;
      }
      score += added;
    }
    if (score == -INFINITY) { /* a final score of -inf hides the key */
      visible[j] = false;
      continue;
    }
    scores[j] = score;
    any_visible = true;
    if (isnan(score))
      any_nan = true;
    else if (score > max_score)
      max_score = score;
  }

  /* The sink is one more key, of value zero, whose score is the logit
   * itself: it joins the maximum and the sum, never the output's numerator,
   * and is read by every row (so a NaN sink poisons every row). */
  if (head->has_sink) {
    if (isnan(head->sink))
      any_nan = true;
    else if (head->sink > max_score)
      max_score = head->sink;
  }
  if (any_nan) {
    for (int64_t d = 0; d < Dv; d++) out_row[d] = NAN;
    *lse = NAN;
    return;
  }
  if (!any_visible) { /* zeros, and lse the sink's alone (-inf without one) */
    if (head->has_sink) *lse = head->sink;
    return;
  }
  double sum = head->has_sink ? exp(head->sink - max_score) : 0.0;
  for (int64_t j = 0; j < head->kv_length; j++) {
    if (!visible[j]) continue;
    /* exp(+inf - +inf) is NaN: an infinite score poisons the row, which is
     * what IEEE arithmetic on the formula gives. */
    double weight = exp(scores[j] - max_score);
    sum += weight;
    for (int64_t d = 0; d < Dv; d++)
      out_row[d] += weight * head->values[j * Dv + d];
  }
  for (int64_t d = 0; d < Dv; d++) out_row[d] /= sum;
  *lse = max_score + log(sum);
}

void flashcpu_oracle_row(const flashcpu_tensor *q, const flashcpu_tensor *k,
                         const flashcpu_tensor *v,
                         const flashcpu_attention_params *params, int64_t b,
                         int64_t h, int64_t i, double *out_row, double *lse) {
  flashcpu_attention_params defaults = default_params();
  if (!params) params = &defaults;
  oracle_head head;
  if (load_head(k, v, q, params, b, h, &head) != 0) {
    /* The oracle cannot fail quietly: NaN fails any comparison. */
    for (int64_t d = 0; d < v->dims[3]; d++) out_row[d] = NAN;
    *lse = NAN;
    return;
  }
  attend_row(q, &head, i, out_row, lse);
  free_head(&head);
}

int flashcpu_oracle_head(const flashcpu_tensor *q, const flashcpu_tensor *k,
                         const flashcpu_tensor *v,
                         const flashcpu_attention_params *params, int64_t b,
                         int64_t h, double *out, double *lse) {
  flashcpu_attention_params defaults = default_params();
  if (!params) params = &defaults;
  oracle_head head;
  if (load_head(k, v, q, params, b, h, &head) != 0) return -1;
  for (int64_t i = 0; i < q->dims[1]; i++)
    attend_row(q, &head, i, out + i * v->dims[3], &lse[i]);
  free_head(&head);
  return 0;
}
