/* Which ggml flash-attention ops flashcpu computes, and the views and
 * parameters of each call (ggml_mapping.h). */
#include "ggml/ggml_mapping.h"

#include "ggml/ggml_mask.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int decline(char *why, size_t size, const char *format, ...) {
  if (size) {
    va_list args;
    va_start(args, format);
    vsnprintf(why, size, format, args);
    va_end(args);
  }
  return 0;
}

/* Elements per block and bytes per block of a K/V type; 0 for a type
 * flashcpu does not read. */
static int block_of(int32_t type, int64_t *elements, size_t *bytes) {
  switch (type) {
  case FCG_TYPE_F32:
    *elements = 1, *bytes = 4;
    return 1;
  case FCG_TYPE_F16:
  case FCG_TYPE_BF16:
    *elements = 1, *bytes = 2;
    return 1;
  case FCG_TYPE_Q8_0:
    *elements = 32, *bytes = 34;
    return 1;
  default:
    return 0;
  }
}

static flashcpu_dtype dtype_of(int32_t type) {
  switch (type) {
  case FCG_TYPE_F16:
    return FLASHCPU_DTYPE_F16;
  case FCG_TYPE_BF16:
    return FLASHCPU_DTYPE_BF16;
  case FCG_TYPE_Q8_0:
    return FLASHCPU_DTYPE_Q8_0;
  default:
    return FLASHCPU_DTYPE_F32;
  }
}

static const char *type_name(int32_t type) {
  switch (type) {
  case FCG_TYPE_F32:
    return "f32";
  case FCG_TYPE_F16:
    return "f16";
  case FCG_TYPE_BF16:
    return "bf16";
  case FCG_TYPE_Q8_0:
    return "q8_0";
  default:
    return "another type";
  }
}

/* Rows contiguous (nb[0] one block), whole blocks per row, every other
 * stride a whole number of blocks. */
static int layout_ok(const fcg_tensor *t, const char *name, char *why,
                     size_t size) {
  int64_t elements;
  size_t bytes;
  if (!block_of(t->type, &elements, &bytes))
    return decline(why, size,
                   "%s is %s (type %d); flashcpu reads f32, f16, "
                   "bf16 and q8_0",
                   name, type_name(t->type), (int)t->type);
  for (int d = 0; d < 4; d++)
    if (t->ne[d] < 0)
      return decline(why, size, "%s has ne[%d] = %lld", name, d,
                     (long long)t->ne[d]);
  if (t->nb[0] != bytes)
    return decline(why, size, "%s's rows are not contiguous (nb[0] = %zu)",
                   name, t->nb[0]);
  if (t->ne[0] % elements != 0)
    return decline(why, size, "%s's head size %lld is not whole %s blocks",
                   name, (long long)t->ne[0], type_name(t->type));
  for (int d = 1; d < 4; d++)
    if (t->nb[d] % bytes != 0)
      return decline(why, size, "%s's nb[%d] = %zu is not whole elements", name,
                     d, t->nb[d]);
  return 1;
}

static int check_inputs(const fcg_flash_attn *op, char *why, size_t size) {
  const fcg_tensor *q = &op->q, *k = &op->k, *v = &op->v;
  if (q->type != FCG_TYPE_F32)
    return decline(why, size, "q is %s; ggml defines f32 q",
                   type_name(q->type));
  if (!layout_ok(q, "q", why, size) || !layout_ok(k, "k", why, size) ||
      !layout_ok(v, "v", why, size))
    return 0;
  if (k->ne[0] != q->ne[0])
    return decline(why, size, "k's head size %lld is not q's %lld",
                   (long long)k->ne[0], (long long)q->ne[0]);
  if (v->ne[1] != k->ne[1] || v->ne[2] != k->ne[2])
    return decline(why, size,
                   "v's keys or heads (%lld, %lld) are not k's "
                   "(%lld, %lld)",
                   (long long)v->ne[1], (long long)v->ne[2],
                   (long long)k->ne[1], (long long)k->ne[2]);
  if (k->ne[3] != q->ne[3] || v->ne[3] != q->ne[3])
    return decline(why, size, "k or v has another batch than q's %lld",
                   (long long)q->ne[3]);
  if (k->ne[2] < 1 || q->ne[2] % k->ne[2] != 0)
    return decline(why, size, "q's %lld heads are not a multiple of k's %lld",
                   (long long)q->ne[2], (long long)k->ne[2]);
  return 1;
}

static int check_out(const fcg_flash_attn *op, char *why, size_t size) {
  const fcg_tensor *o = &op->out, *q = &op->q;
  if (o->type != FCG_TYPE_F32)
    return decline(why, size, "the result is %s, not f32", type_name(o->type));
  if (o->ne[0] != op->v.ne[0] || o->ne[1] != q->ne[2] || o->ne[2] != q->ne[1] ||
      o->ne[3] != q->ne[3])
    return decline(why, size, "the result is not [Dv, Hq, L, B] of q and v");
  if (o->nb[0] != 4 || o->nb[1] % 4 || o->nb[2] % 4 || o->nb[3] % 4)
    return decline(why, size, "the result's strides are not whole f32 rows");
  return 1;
}

static int check_mask_and_sinks(const fcg_flash_attn *op, char *why,
                                size_t size) {
  const fcg_tensor *m = op->mask, *s = op->sinks;
  if (m) {
    if (m->type != FCG_TYPE_F16)
      return decline(why, size, "the mask is %s, not f16", type_name(m->type));
    if (m->ne[0] < op->k.ne[1] || m->ne[1] < op->q.ne[1])
      return decline(why, size,
                     "the mask [%lld, %lld] does not cover %lld "
                     "keys x %lld rows",
                     (long long)m->ne[0], (long long)m->ne[1],
                     (long long)op->k.ne[1], (long long)op->q.ne[1]);
    if (m->ne[2] < 1 || m->ne[3] < 1 || op->q.ne[2] % m->ne[2] ||
        op->q.ne[3] % m->ne[3])
      return decline(why, size,
                     "the mask's planes (%lld, %lld) do not "
                     "repeat into q's heads and batch",
                     (long long)m->ne[2], (long long)m->ne[3]);
    if (m->nb[0] != 2 || m->nb[1] % 2 || m->nb[2] % 2 || m->nb[3] % 2)
      return decline(why, size, "the mask's strides are not whole f16 rows");
  }
  if (s) {
    if (s->type != FCG_TYPE_F32 || s->nb[0] != 4)
      return decline(why, size, "the sinks are not contiguous f32");
    if (s->ne[0] < op->q.ne[2])
      return decline(why, size, "%lld sinks for %lld heads",
                     (long long)s->ne[0], (long long)op->q.ne[2]);
  }
  return 1;
}

int fcg_supports(const fcg_flash_attn *op, char *why, size_t why_size) {
  if (why_size) why[0] = '\0';
  if (!check_inputs(op, why, why_size) || !check_out(op, why, why_size) ||
      !check_mask_and_sinks(op, why, why_size))
    return 0;
  /* flashcpu reads scale 0 as 1/sqrt(D); ggml's 0 is a real 0. */
  if (!isfinite(op->scale) || op->scale == 0.0f)
    return decline(why, why_size,
                   "scale %g (flashcpu takes finite, "
                   "non-zero scales)",
                   (double)op->scale);
  if (!isfinite(op->logit_softcap) || !isfinite(op->max_bias))
    return decline(why, why_size, "softcap %g or max_bias %g not finite",
                   (double)op->logit_softcap, (double)op->max_bias);
  if (op->max_bias > 0.0f && !op->mask)
    return decline(why, why_size, "max_bias without a mask");
  if (op->precision != FCG_PREC_DEFAULT && op->precision != FCG_PREC_F32)
    return decline(why, why_size, "precision %d", (int)op->precision);
  return 1;
}

float fcg_alibi_slope(int64_t n_head, float max_bias, int64_t h) {
  if (!(max_bias > 0.0f)) return 1.0f;
  /* The largest power of two <= n_head heads take the first geometric
   * series, the others interleave a second one (ALiBi's rule for head
   * counts that are not powers of two), in ggml's float arithmetic. */
  const uint32_t base = 1u << (uint32_t)floor(log2((double)n_head));
  const float first = powf(2.0f, -max_bias / (float)base);
  const float second = powf(2.0f, -(max_bias / 2.0f) / (float)base);
  if (h < (int64_t)base) return powf(first, (float)(h + 1));
  return powf(second, (float)(2 * (h - (int64_t)base) + 1));
}

/* A view of t with its seq and heads in the given ggml axes, heads
 * [head_begin, head_begin + heads). */
static flashcpu_tensor view_of(const fcg_tensor *t, int seq_axis,
                               int heads_axis, int64_t head_begin,
                               int64_t heads) {
  int64_t elements;
  size_t bytes;
  if (!block_of(t->type, &elements, &bytes)) elements = 1, bytes = 4;
  flashcpu_tensor view;
  view.data = (char *)t->data + (size_t)head_begin * t->nb[heads_axis];
  view.dtype = dtype_of(t->type);
  const int64_t dims[4] = {t->ne[3], t->ne[seq_axis], heads, t->ne[0]};
  const size_t nbs[4] = {t->nb[3], t->nb[seq_axis], t->nb[heads_axis], 0};
  for (int d = 0; d < 4; d++) {
    view.dims[d] = dims[d];
    view.strides[d] = (int64_t)(nbs[d] / bytes) * elements;
  }
  view.strides[3] = 1;
  return view;
}

void fcg_map(const fcg_flash_attn *op, const fcg_plan *plan,
             const int64_t *kv_lengths, int64_t head_begin, float *mask_copy,
             fcg_call *call) {
  const int64_t heads = plan->heads_per_call;
  const int64_t group = op->q.ne[2] / op->k.ne[2];
  /* A call takes whole groups of query heads, or part of one group (then
   * its one kv head). */
  const int64_t kv_heads = heads % group == 0 ? heads / group : 1;
  const int64_t kv_begin = head_begin / group;
  call->q = view_of(&op->q, 1, 2, head_begin, heads);
  call->k = view_of(&op->k, 1, 2, kv_begin, kv_heads);
  call->v = view_of(&op->v, 1, 2, kv_begin, kv_heads);
  call->out = view_of(&op->out, 2, 1, head_begin, heads);

  flashcpu_attention_params *p = &call->params;
  flashcpu_attention_params_init(p);
  p->scale = op->scale;
  /* cap * tanh(x / cap) is even in cap: a negative ggml softcap caps as
   * its magnitude does. */
  p->softcap = fabsf(op->logit_softcap);
  if (op->sinks) {
    p->sinks = (const float *)op->sinks->data + head_begin;
    p->sinks_dtype = FLASHCPU_DTYPE_F32;
  }
  switch (plan->mask_kind) {
  case FCG_MASK_CAUSAL:
    p->flags = FLASHCPU_FLAG_CAUSAL; /* fall through */
  case FCG_MASK_PREFIX:
    p->kv_lengths = kv_lengths;
    break;
  case FCG_MASK_COPY:
    call->mask = fcg_copy_mask(op, head_begin, heads, mask_copy);
    p->additive_mask = &call->mask;
    break;
  default:
    break;
  }
}
