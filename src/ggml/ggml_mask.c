/* ggml's f16 mask in the form flashcpu runs fastest with the same result:
 * key lengths (and causal) where the mask is only zeros and -infs in
 * those shapes, else an f32 copy (ggml_mapping.h). */
#include "ggml/ggml_mask.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define FCG_HAVE_F16C_PATH 1
#endif

enum { F16_HIDDEN = 0xfc00 /* -inf */, F16_MAGNITUDE = 0x7fff };

static const uint16_t *mask_row(const fcg_tensor *m, int64_t b, int64_t plane,
                                int64_t i) {
  return (const uint16_t *)((const char *)m->data +
                            (size_t)(b % m->ne[3]) * m->nb[3] +
                            (size_t)plane * m->nb[2] + (size_t)i * m->nb[1]);
}

/* 1 when the row's first `visible` values are +-0 and the rest -inf: two
 * branch-free reductions, so that the compiler vectorises them. */
static int row_is(const uint16_t *row, int64_t visible, int64_t keys) {
  uint32_t zeros = 0, hidden = 0;
  for (int64_t j = 0; j < visible; j++) zeros |= row[j] & F16_MAGNITUDE;
  for (int64_t j = visible; j < keys; j++) hidden |= row[j] ^ F16_HIDDEN;
  return (zeros | hidden) == 0;
}

/* One plane of batch b: FCG_MASK_PREFIX or FCG_MASK_CAUSAL with the key
 * length flashcpu takes, or FCG_MASK_COPY. */
static fcg_mask_kind plane_pattern(const fcg_tensor *m, int64_t b,
                                   int64_t plane, int64_t rows, int64_t keys,
                                   int64_t *length) {
  const uint16_t *row = mask_row(m, b, plane, 0);
  int64_t first = 0;
  while (first < keys && (row[first] & F16_MAGNITUDE) == 0) first++;
  if (!row_is(row, first, keys)) return FCG_MASK_COPY;
  fcg_mask_kind kind = FCG_MASK_PREFIX;
  if (rows > 1) {
    row = mask_row(m, b, plane, 1);
    if (!row_is(row, first, keys))
      kind = first + 1 <= keys && row_is(row, first + 1, keys) ? FCG_MASK_CAUSAL
                                                               : FCG_MASK_COPY;
  }
  for (int64_t i = 2; i < rows && kind != FCG_MASK_COPY; i++) {
    const int64_t visible = kind == FCG_MASK_CAUSAL ? first + i : first;
    if (visible > keys || !row_is(mask_row(m, b, plane, i), visible, keys))
      kind = FCG_MASK_COPY;
  }
  *length = kind == FCG_MASK_CAUSAL ? first + rows - 1 : first;
  return kind;
}

/* Lengths per batch when every plane of every batch has the same pattern
 * (and each batch's planes the same length); else FCG_MASK_COPY. */
static fcg_mask_kind mask_pattern(const fcg_flash_attn *op,
                                  int64_t *kv_lengths) {
  const fcg_tensor *m = op->mask;
  const int64_t batch = op->q.ne[3], rows = op->q.ne[1], keys = op->k.ne[1];
  fcg_mask_kind kind = FCG_MASK_NONE;
  /* Batches past the mask's planes repeat them. */
  for (int64_t b = 0; b < m->ne[3] && b < batch; b++) {
    int64_t length = -1;
    for (int64_t plane = 0; plane < m->ne[2]; plane++) {
      int64_t plane_length;
      const fcg_mask_kind found =
          plane_pattern(m, b, plane, rows, keys, &plane_length);
      if (found == FCG_MASK_COPY || (kind != FCG_MASK_NONE && found != kind) ||
          (length >= 0 && plane_length != length))
        return FCG_MASK_COPY;
      kind = found;
      length = plane_length;
    }
    kv_lengths[b] = length;
  }
  for (int64_t b = m->ne[3]; b < batch; b++)
    kv_lengths[b] = kv_lengths[b % m->ne[3]];
  return kind;
}

static int per_head_planes(const fcg_flash_attn *op) {
  return op->max_bias > 0.0f || op->mask->ne[2] > 1;
}

void fcg_plan_op(const fcg_flash_attn *op, size_t copy_budget,
                 int64_t *kv_lengths, fcg_plan *plan) {
  const int64_t heads = op->q.ne[2], rows = op->q.ne[1];
  plan->mask_kind = FCG_MASK_NONE;
  plan->heads_per_call = heads;
  plan->copy_floats = 0;
  if (!op->mask || rows == 0) return;
  plan->mask_kind = mask_pattern(op, kv_lengths);
  if (plan->mask_kind != FCG_MASK_COPY) return;

  const int64_t batch_planes = op->mask->ne[3] > 1 ? op->q.ne[3] : 1;
  const size_t head_floats =
      (size_t)batch_planes * (size_t)rows * (size_t)op->k.ne[1];
  if (!per_head_planes(op)) {
    plan->copy_floats = head_floats;
    return;
  }
  /* The most heads whose copy fits the budget, in whole kv-head groups or
   * within one group. */
  const int64_t group = heads / op->k.ne[2];
  int64_t best = 1;
  for (int64_t n = 2; n <= heads; n++)
    if (heads % n == 0 && (n % group == 0 || group % n == 0) &&
        (size_t)n * head_floats * sizeof(float) <= copy_budget)
      best = n;
  plan->heads_per_call = best;
  plan->copy_floats = (size_t)best * head_floats;
}

static float half_to_float(uint16_t half) {
  const uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
  if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24, exact */
    const float magnitude = (float)mantissa * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = sign | (mantissa << 13) |
                        (exponent == 0x1f ? 0x7f800000u /* inf, NaN */
                                          : (exponent + 112u) << 23);
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static void convert_portable(const uint16_t *src, float *dst, int64_t n,
                             float factor) {
  if (factor == 1.0f)
    for (int64_t i = 0; i < n; i++) dst[i] = half_to_float(src[i]);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = half_to_float(src[i]) * factor;
}

#ifdef FCG_HAVE_F16C_PATH
__attribute__((target("avx,f16c"))) static void
convert_f16c(const uint16_t *src, float *dst, int64_t n, float factor) {
  const __m256 scale = _mm256_set1_ps(factor);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x =
        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
    _mm256_storeu_ps(dst + i, factor == 1.0f ? x : _mm256_mul_ps(x, scale));
  }
  convert_portable(src + i, dst + i, n - i, factor);
}

/* F16C and the OS saving the AVX registers (XCR0 bits 1 and 2). */
static int cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((ecx & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return 0;
  unsigned xcr0_low, xcr0_high;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  (void)xcr0_high;
  return (xcr0_low & 6u) == 6u;
}
#endif

typedef void (*convert_fn)(const uint16_t *, float *, int64_t, float);

static convert_fn best_converter(void) {
#ifdef FCG_HAVE_F16C_PATH
  if (cpu_has_f16c()) return convert_f16c;
#endif
  return convert_portable;
}

void fcg_f16_to_f32_scaled(const uint16_t *src, float *dst, int64_t n,
                           float factor) {
  best_converter()(src, dst, n, factor);
}

flashcpu_additive_mask fcg_copy_mask(const fcg_flash_attn *op,
                                     int64_t head_begin, int64_t heads,
                                     float *copy) {
  const fcg_tensor *m = op->mask;
  const int64_t rows = op->q.ne[1], keys = op->k.ne[1];
  const int per_head = per_head_planes(op), per_batch = m->ne[3] > 1;
  const int64_t head_planes = per_head ? heads : 1;
  const int64_t batch_planes = per_batch ? op->q.ne[3] : 1;
  const convert_fn convert = best_converter();
  float *row_out = copy;
  for (int64_t b = 0; b < batch_planes; b++)
    for (int64_t h = 0; h < head_planes; h++) {
      const int64_t head = head_begin + h;
      const int64_t plane = per_head ? head % m->ne[2] : 0;
      const float slope = fcg_alibi_slope(op->q.ne[2], op->max_bias, head);
      for (int64_t i = 0; i < rows; i++, row_out += keys)
        convert(mask_row(m, b, plane, i), row_out, keys, slope);
    }
  flashcpu_additive_mask view;
  view.data = copy;
  view.strides[0] = per_batch ? head_planes * rows * keys : 0;
  view.strides[1] = per_head ? rows * keys : 0;
  view.strides[2] = keys;
  view.strides[3] = 1;
  return view;
}
