/* ggml's flash attention (GGML_OP_FLASH_ATTN_EXT) as flashcpu_attention
 * calls. Plain C with no ggml header, so that flashcpu's tests link it
 * without a ggml tree; the backend (ggml_backend_flashcpu.c) fills the
 * descriptions from ggml tensors.
 *
 * Tensors come as ggml describes them: ne[4] extents, ne[0] innermost, and
 * nb[4] byte strides, with ggml's type codes:
 *   q     f32 [D,  L,    Hq,  B]        (any strides, rows contiguous)
 *   k     [D,  S,    Hkv, B]  f32, f16, bf16 or q8_0, read in place
 *   v     [Dv, S,    Hkv, B]  likewise (its own type)
 *   mask  f16 [>= S, >= L, Hm, Bm]: query head h reads plane h % Hm, batch
 *         b plane b % Bm (ggml's broadcast by repetition)
 *   sinks f32 [Hq]
 *   out   f32 [Dv, Hq, L, B]            (ggml's permuted result)
 * and the op's parameters scale, max_bias, logit_softcap and precision.
 *
 * ggml's definition, per score: s = softcap * tanh(q.k * scale / softcap)
 * (q.k * scale without softcap), then s += slope(h) * mask where slope is
 * 1 without max_bias and ggml's ALiBi slope with it; a -inf term hides the
 * key; the sink joins the softmax as a logit with a zero value row. That
 * is flashcpu's order too (softcap, then the additive mask), so only the
 * mask needs work: flashcpu's additive mask is f32 and has no per-head
 * factor. fcg_plan reads the mask once and picks the cheapest exact form:
 *   FCG_MASK_NONE     no mask
 *   FCG_MASK_PREFIX   every row sees the first n_b keys (0), hides the rest
 *                     (-inf): kv_lengths, no mask at all
 *   FCG_MASK_CAUSAL   row i sees the first n_b - L + 1 + i keys: causal
 *                     (bottom-right) over kv_lengths n_b, no mask
 *   FCG_MASK_COPY     anything else: an f32 copy per call (times the ALiBi
 *                     slope per head where max_bias > 0), heads cut into
 *                     calls so that the copy stays within a budget
 * A mask of zeros and -infs is unchanged by the ALiBi slopes (slope * 0 =
 * 0), so the first three hold with max_bias too. */
#ifndef FLASHCPU_GGML_MAPPING_H
#define FLASHCPU_GGML_MAPPING_H

#include <stddef.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ggml's type codes (enum ggml_type) and precisions (enum ggml_prec): fixed
 * values, part of the GGUF format. */
enum {
  FCG_TYPE_F32 = 0,
  FCG_TYPE_F16 = 1,
  FCG_TYPE_Q8_0 = 8,
  FCG_TYPE_BF16 = 30,
  FCG_PREC_DEFAULT = 0,
  FCG_PREC_F32 = 10
};

typedef struct fcg_tensor {
  void *data; /* may be NULL for fcg_supports */
  int32_t type;
  int64_t ne[4];
  size_t nb[4];
} fcg_tensor;

typedef struct fcg_flash_attn {
  fcg_tensor q, k, v, out;
  const fcg_tensor *mask;               /* NULL: none */
  const fcg_tensor *sinks;              /* NULL: none */
  float scale, max_bias, logit_softcap; /* op_params[0..2] */
  int32_t precision;                    /* op_params[3] */
} fcg_flash_attn;

/* 1 when flashcpu computes op exactly as ggml defines it; else 0 and the
 * reason in why (truncated to why_size bytes). Reads no data. */
int fcg_supports(const fcg_flash_attn *op, char *why, size_t why_size);

/* The ALiBi slope of query head h of n_head with max_bias, as ggml computes
 * it (1 when max_bias <= 0). */
float fcg_alibi_slope(int64_t n_head, float max_bias, int64_t h);

typedef enum fcg_mask_kind {
  FCG_MASK_NONE = 0,
  FCG_MASK_PREFIX = 1,
  FCG_MASK_CAUSAL = 2,
  FCG_MASK_COPY = 3
} fcg_mask_kind;

typedef struct fcg_plan {
  fcg_mask_kind mask_kind;
  int64_t heads_per_call; /* q heads per flashcpu_attention call */
  size_t copy_floats;     /* floats of the f32 mask copy a call needs */
} fcg_plan;

/* Plans op (which fcg_supports accepts): reads the mask to choose its
 * form, writing the B = q.ne[3] key lengths of FCG_MASK_PREFIX and
 * FCG_MASK_CAUSAL to kv_lengths, and cuts the heads so that a call's copy
 * stays within copy_budget bytes (one head at least, whatever the
 * budget). */
void fcg_plan_op(const fcg_flash_attn *op, size_t copy_budget,
                 int64_t *kv_lengths, fcg_plan *plan);

/* One flashcpu_attention call: params points at this struct's mask and
 * the caller's kv_lengths, so the struct stays where fcg_map filled it. */
typedef struct fcg_call {
  flashcpu_tensor q, k, v, out;
  flashcpu_additive_mask mask;
  flashcpu_attention_params params;
} fcg_call;

/* The call for q heads [head_begin, head_begin + plan->heads_per_call):
 * views into op's tensors and, for FCG_MASK_COPY, the mask of those heads
 * written to mask_copy (plan->copy_floats floats). */
void fcg_map(const fcg_flash_attn *op, const fcg_plan *plan,
             const int64_t *kv_lengths, int64_t head_begin, float *mask_copy,
             fcg_call *call);

/* n f16 values to f32 times factor (the ALiBi slope; 1 for a plain copy),
 * each product rounded once as ggml rounds it. */
void fcg_f16_to_f32_scaled(const uint16_t *src, float *dst, int64_t n,
                           float factor);

#ifdef __cplusplus
}
#endif

#endif
