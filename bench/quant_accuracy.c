/* How far attention over a quantized KV cache lands from attention over the
 * f32 cache, beside the bf16 cache's distance: llama3-8b-shaped decode
 * (32 query heads, 8 kv heads, head_dim 128, 4096 keys, one row), on random
 * K/V and on K/V with outliers (4 channels of K 20x larger, as trained
 * models' keys have, and 1% of V values 10x larger). Each format is
 * written by flashcpu_quantize: I8 and U8 with per-token scales, F8 with a
 * per-tensor scale (max|x| / its largest), Q8_0 with its blocks, and I8
 * with per-channel K scales. Prints, per data set and format, the largest
 * and the RMS error of the output relative to the RMS of the f32 output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcpu/flashcpu.h"

enum { HQ = 32, HKV = 8, D = 128, S = 4096 };

static double uniform(unsigned long long *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*state >> 11) * 0x1p-53;
}

typedef struct format {
  const char *name;
  flashcpu_dtype dtype;
  int per_channel_k; /* K scales per channel instead of per token */
} format;

static float largest_abs(const float *x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
  return m;
}

/* Quantizes one side; the scales go into *scales (which holds room). */
static int quantize_side(flashcpu_context *ctx, const format *f, const float *x,
                         unsigned char *codes, float *scales, float *zeros,
                         int is_k, flashcpu_kv_scales *view,
                         const flashcpu_kv_scales **use) {
  const flashcpu_tensor src =
      flashcpu_tensor_bshd((void *)x, FLASHCPU_DTYPE_F32, 1, S, HKV, D);
  const flashcpu_tensor dst =
      flashcpu_tensor_bshd(codes, f->dtype, 1, S, HKV, D);
  memset(view, 0, sizeof *view);
  view->data = scales;
  view->dtype = FLASHCPU_DTYPE_F32;
  *use = view;
  if (f->dtype == FLASHCPU_DTYPE_Q8_0) {
    *use = NULL;
  } else if (f->dtype == FLASHCPU_DTYPE_F8_E4M3 ||
             f->dtype == FLASHCPU_DTYPE_F8_E5M2) {
    const float top = f->dtype == FLASHCPU_DTYPE_F8_E4M3 ? 448.0f : 57344.0f;
    scales[0] = largest_abs(x, (size_t)S * HKV * D) / top; /* per tensor */
  } else if (f->per_channel_k && is_k) {
    for (int h = 0; h < HKV; h++)
      for (int d = 0; d < D; d++) {
        float m = 0.0f;
        for (int s = 0; s < S; s++) {
          const float a = fabsf(x[((size_t)s * HKV + h) * D + d]);
          m = a > m ? a : m;
        }
        scales[h * D + d] = m > 0.0f ? m / 127.0f : 1.0f;
      }
    view->strides[2] = D;
    view->strides[3] = 1;
  } else { /* per token and head, computed by the library */
    view->strides[0] = (int64_t)S * HKV;
    view->strides[1] = HKV;
    view->strides[2] = 1;
    if (f->dtype == FLASHCPU_DTYPE_U8) view->zero_points = zeros;
  }
  if (flashcpu_quantize(ctx, &src, &dst, *use) != FLASHCPU_OK) {
    fprintf(stderr, "%s: %s\n", f->name, flashcpu_last_error(ctx));
    return -1;
  }
  return 0;
}

int main(void) {
  flashcpu_context *ctx = NULL;
  if (flashcpu_context_create(NULL, &ctx) != FLASHCPU_OK) return 1;
  const size_t kv_count = (size_t)S * HKV * D, q_count = (size_t)HQ * D;
  float *k = malloc(kv_count * 4), *v = malloc(kv_count * 4),
        *q = malloc(q_count * 4);
  float *reference = malloc(q_count * 4), *out = malloc(q_count * 4);
  unsigned char *kc = malloc(kv_count * 2), *vc = malloc(kv_count * 2);
  float *ks = malloc(kv_count * 4), *vs = malloc(kv_count * 4);
  float *kz = malloc(kv_count * 4), *vz = malloc(kv_count * 4);
  const format formats[] = {{"bf16", FLASHCPU_DTYPE_BF16, 0},
                            {"i8 per token", FLASHCPU_DTYPE_I8, 0},
                            {"i8 K per channel", FLASHCPU_DTYPE_I8, 1},
                            {"u8 per token", FLASHCPU_DTYPE_U8, 0},
                            {"f8_e4m3 per tensor", FLASHCPU_DTYPE_F8_E4M3, 0},
                            {"f8_e5m2 per tensor", FLASHCPU_DTYPE_F8_E5M2, 0},
                            {"q8_0", FLASHCPU_DTYPE_Q8_0, 0}};
  printf("data      format              max |err| / rms   rms err / rms\n");
  for (int outliers = 0; outliers < 2; outliers++) {
    unsigned long long state = 42;
    for (size_t i = 0; i < kv_count; i++) {
      k[i] = (float)(uniform(&state) * 2 - 1);
      v[i] = (float)(uniform(&state) * 2 - 1);
      if (outliers && i % D < 4) k[i] *= 20.0f;
      if (outliers && uniform(&state) < 0.01) v[i] *= 10.0f;
    }
    for (size_t i = 0; i < q_count; i++)
      q[i] = (float)(uniform(&state) * 2 - 1);
    const flashcpu_tensor qt =
        flashcpu_tensor_bshd(q, FLASHCPU_DTYPE_F32, 1, 1, HQ, D);
    const flashcpu_tensor kt =
        flashcpu_tensor_bshd(k, FLASHCPU_DTYPE_F32, 1, S, HKV, D);
    const flashcpu_tensor vt =
        flashcpu_tensor_bshd(v, FLASHCPU_DTYPE_F32, 1, S, HKV, D);
    const flashcpu_tensor rt =
        flashcpu_tensor_bshd(reference, FLASHCPU_DTYPE_F32, 1, 1, HQ, D);
    const flashcpu_tensor ot =
        flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, 1, 1, HQ, D);
    if (flashcpu_attention(ctx, &qt, &kt, &vt, &rt, NULL, NULL) != FLASHCPU_OK)
      return 1;
    double rms = 0.0;
    for (size_t i = 0; i < q_count; i++)
      rms += (double)reference[i] * reference[i];
    rms = sqrt(rms / (double)q_count);
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
      const format *fmt = &formats[f];
      flashcpu_attention_params params;
      flashcpu_attention_params_init(&params);
      flashcpu_kv_scales k_view, v_view;
      const flashcpu_kv_scales *k_use = NULL, *v_use = NULL;
      if (fmt->dtype == FLASHCPU_DTYPE_BF16) {
        const flashcpu_tensor kb =
            flashcpu_tensor_bshd(kc, FLASHCPU_DTYPE_BF16, 1, S, HKV, D);
        const flashcpu_tensor vb =
            flashcpu_tensor_bshd(vc, FLASHCPU_DTYPE_BF16, 1, S, HKV, D);
        for (size_t i = 0; i < kv_count; i++) { /* round to nearest even */
          unsigned int bits;
          memcpy(&bits, &k[i], 4);
          ((unsigned short *)kc)[i] =
              (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
          memcpy(&bits, &v[i], 4);
          ((unsigned short *)vc)[i] =
              (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        }
        if (flashcpu_attention(ctx, &qt, &kb, &vb, &ot, NULL, NULL) !=
            FLASHCPU_OK)
          return 1;
      } else {
        format v_format = *fmt;
        v_format.per_channel_k = 0;
        if (quantize_side(ctx, fmt, k, kc, ks, kz, 1, &k_view, &k_use) ||
            quantize_side(ctx, &v_format, v, vc, vs, vz, 0, &v_view, &v_use))
          return 1;
        params.k_scales = k_use;
        params.v_scales = v_use;
        const flashcpu_tensor kq =
            flashcpu_tensor_bshd(kc, fmt->dtype, 1, S, HKV, D);
        const flashcpu_tensor vq =
            flashcpu_tensor_bshd(vc, fmt->dtype, 1, S, HKV, D);
        if (flashcpu_attention(ctx, &qt, &kq, &vq, &ot, NULL, &params) !=
            FLASHCPU_OK) {
          fprintf(stderr, "%s: %s\n", fmt->name, flashcpu_last_error(ctx));
          return 1;
        }
      }
      double worst = 0.0, sum = 0.0;
      for (size_t i = 0; i < q_count; i++) {
        const double e = fabs((double)out[i] - reference[i]);
        worst = e > worst ? e : worst;
        sum += e * e;
      }
      printf("%-9s %-19s %.3e         %.3e\n", outliers ? "outliers" : "random",
             fmt->name, worst / rms, sqrt(sum / (double)q_count) / rms);
    }
  }
  flashcpu_context_destroy(ctx);
  return 0;
}
