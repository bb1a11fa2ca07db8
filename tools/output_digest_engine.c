/* The output digest's engine-shaped problems: quantized caches (contiguous
 * and paged), a paged serving step (decode, verify under a tree, a prefill
 * chunk) in shuffled pages of 16 and of 1, sinks with ALiBi, and a merge of
 * partial states. Each line: the problem, the ISA, the status, the FNV-1a
 * hash of out and lse, and the kernels that ran. Fixed pseudo-random
 * inputs; only the public API. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output_digest.h"

int digest_report(const char *name, flashcpu_context *ctx,
                  flashcpu_status status, const void *out, size_t out_bytes,
                  const float *lse, size_t lse_count) {
  if (digest_forced && status == FLASHCPU_ERROR_INVALID_ARGUMENT) {
    printf("%-22s %-7s n/a   %s\n", name,
           flashcpu_isa_name(flashcpu_context_isa(ctx)),
           flashcpu_context_last_kernels(ctx));
    return 0;
  }
  uint64_t hash = digest_hash(14695981039346656037ull, out, out_bytes);
  if (lse) hash = digest_hash(hash, lse, lse_count * sizeof(float));
  printf("%-22s %-7s %s %016llx %s\n", name,
         flashcpu_isa_name(flashcpu_context_isa(ctx)),
         status == FLASHCPU_OK ? "ok   " : flashcpu_status_name(status),
         (unsigned long long)hash,
         status == FLASHCPU_OK ? flashcpu_context_last_kernels(ctx)
                               : flashcpu_last_error(ctx));
  return status == FLASHCPU_OK ? 0 : 1;
}

/* ------------------------------------------------ quantized, contiguous */

static const flashcpu_dtype quantized[] = {
    FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_U8, FLASHCPU_DTYPE_F8_E4M3,
    FLASHCPU_DTYPE_F8_E5M2, FLASHCPU_DTYPE_Q8_0};
enum { QUANTIZED_COUNT = sizeof quantized / sizeof quantized[0] };

/* A [1, S, Hkv, D] cache quantized from f32 values, with per-token f32
 * scales (and U8 zero points) where the dtype takes scales. */
typedef struct quantized_cache {
  void *codes;
  float *scales, *zero_points;
  flashcpu_tensor view;
  flashcpu_kv_scales scale_view;
  int has_scales;
} quantized_cache;

static flashcpu_status quantized_cache_make(flashcpu_context *ctx,
                                            quantized_cache *c,
                                            flashcpu_dtype dtype, int64_t S,
                                            int64_t Hkv, int64_t D) {
  memset(c, 0, sizeof *c);
  float *values = digest_fill(S * Hkv * D, FLASHCPU_DTYPE_F32);
  const size_t bytes = flashcpu_dtype_size(dtype) *
                       (size_t)(S * Hkv * D / flashcpu_dtype_block(dtype));
  c->codes = calloc(1, bytes);
  c->view = flashcpu_tensor_bshd(c->codes, dtype, 1, S, Hkv, D);
  c->has_scales = dtype != FLASHCPU_DTYPE_Q8_0;
  if (c->has_scales) {
    c->scales = calloc((size_t)(S * Hkv), sizeof(float));
    c->scale_view.data = c->scales;
    c->scale_view.dtype = FLASHCPU_DTYPE_F32;
    c->scale_view.strides[1] = Hkv;
    c->scale_view.strides[2] = 1;
    if (dtype == FLASHCPU_DTYPE_U8) {
      c->zero_points = calloc((size_t)(S * Hkv), sizeof(float));
      c->scale_view.zero_points = c->zero_points;
    }
  }
  flashcpu_tensor source =
      flashcpu_tensor_bshd(values, FLASHCPU_DTYPE_F32, 1, S, Hkv, D);
  flashcpu_status status = flashcpu_quantize(
      ctx, &source, &c->view, c->has_scales ? &c->scale_view : NULL);
  free(values);
  return status;
}

static void quantized_cache_free(quantized_cache *c) {
  free(c->codes);
  free(c->scales);
  free(c->zero_points);
}

/* Decode (1 row) and verify (8 causal rows) of bf16 q over each format. */
static int quantized_decode(flashcpu_context *ctx) {
  const int64_t S = 700, Hq = 8, Hkv = 2, D = 128;
  int failures = 0;
  for (int f = 0; f < QUANTIZED_COUNT; f++) {
    for (int64_t L = 1; L <= 8; L += 7) {
      digest_seed(777 + (uint64_t)f);
      quantized_cache k, v;
      flashcpu_status status =
          quantized_cache_make(ctx, &k, quantized[f], S, Hkv, D);
      if (status == FLASHCPU_OK)
        status = quantized_cache_make(ctx, &v, quantized[f], S, Hkv, D);
      void *q = digest_fill(L * Hq * D, FLASHCPU_DTYPE_BF16);
      float *out = calloc((size_t)(L * Hq * D), sizeof(float));
      float *lse = calloc((size_t)(Hq * L), sizeof(float));
      flashcpu_tensor tq =
          flashcpu_tensor_bshd(q, FLASHCPU_DTYPE_BF16, 1, L, Hq, D);
      flashcpu_tensor to =
          flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, 1, L, Hq, D);
      flashcpu_attention_params params;
      flashcpu_attention_params_init(&params);
      params.flags = FLASHCPU_FLAG_CAUSAL;
      params.k_scales = k.has_scales ? &k.scale_view : NULL;
      params.v_scales = v.has_scales ? &v.scale_view : NULL;
      if (status == FLASHCPU_OK)
        status =
            flashcpu_attention(ctx, &tq, &k.view, &v.view, &to, lse, &params);
      char name[64];
      snprintf(name, sizeof name, "quant-%s-rows-%lld",
               flashcpu_dtype_name(quantized[f]), (long long)L);
      failures += digest_report(name, ctx, status, out,
                                (size_t)(L * Hq * D) * sizeof(float), lse,
                                (size_t)(Hq * L));
      quantized_cache_free(&k);
      quantized_cache_free(&v);
      free(q);
      free(out);
      free(lse);
    }
  }
  return failures;
}

/* ------------------------------------------------ sinks, ALiBi, merge */

static int sinks_alibi(flashcpu_context *ctx) {
  static const struct {
    const char *name;
    int64_t L, S;
    flashcpu_dtype dtype, sinks_dtype;
  } shapes[] = {
      {"sinks-alibi-decode", 1, 900, FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F32},
      {"sinks-alibi-prefill", 120, 200, FLASHCPU_DTYPE_F32,
       FLASHCPU_DTYPE_BF16}};
  const int64_t Hq = 8, Hkv = 2, D = 64;
  int failures = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    digest_seed(4242 + s);
    const int64_t L = shapes[s].L, S = shapes[s].S;
    void *q = digest_fill(L * Hq * D, shapes[s].dtype);
    void *k = digest_fill(S * Hkv * D, shapes[s].dtype);
    void *v = digest_fill(S * Hkv * D, shapes[s].dtype);
    void *sinks = digest_fill(Hq, shapes[s].sinks_dtype);
    float slopes[8];
    for (int h = 0; h < Hq; h++) slopes[h] = 0.5f / (float)(1 << h);
    float *out = calloc((size_t)(L * Hq * D), sizeof(float));
    float *lse = calloc((size_t)(Hq * L), sizeof(float));
    flashcpu_tensor tq = flashcpu_tensor_bshd(q, shapes[s].dtype, 1, L, Hq, D);
    flashcpu_tensor tk = flashcpu_tensor_bshd(k, shapes[s].dtype, 1, S, Hkv, D);
    flashcpu_tensor tv = flashcpu_tensor_bshd(v, shapes[s].dtype, 1, S, Hkv, D);
    flashcpu_tensor to =
        flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, 1, L, Hq, D);
    flashcpu_attention_params params;
    flashcpu_attention_params_init(&params);
    params.flags = FLASHCPU_FLAG_CAUSAL;
    params.sinks = sinks;
    params.sinks_dtype = shapes[s].sinks_dtype;
    params.alibi_slopes = slopes;
    failures += digest_report(
        shapes[s].name, ctx,
        flashcpu_attention(ctx, &tq, &tk, &tv, &to, lse, &params), out,
        (size_t)(L * Hq * D) * sizeof(float), lse, (size_t)(Hq * L));
    free(q);
    free(k);
    free(v);
    free(sinks);
    free(out);
    free(lse);
  }
  return failures;
}

static int merge(flashcpu_context *ctx) {
  enum { COUNT = 3, L = 5, H = 8, D = 64 };
  digest_seed(99);
  flashcpu_tensor states[COUNT];
  float *state_lse[COUNT];
  void *values[COUNT];
  for (int i = 0; i < COUNT; i++) {
    const flashcpu_dtype dtype =
        i == 1 ? FLASHCPU_DTYPE_BF16 : FLASHCPU_DTYPE_F32;
    values[i] = digest_fill(L * H * D, dtype);
    states[i] = flashcpu_tensor_bshd(values[i], dtype, 1, L, H, D);
    state_lse[i] = digest_fill(H * L, FLASHCPU_DTYPE_F32);
  }
  state_lse[2][3] = -INFINITY; /* a state that saw no key */
  float out[L * H * D], lse[H * L];
  flashcpu_tensor to =
      flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, 1, L, H, D);
  const flashcpu_status status = flashcpu_merge_states(
      ctx, COUNT, states, (const float *const *)state_lse, &to, lse);
  printf("%-22s %-7s %s %016llx\n", "merge-3",
         flashcpu_isa_name(flashcpu_context_isa(ctx)),
         status == FLASHCPU_OK ? "ok   " : flashcpu_status_name(status),
         (unsigned long long)digest_hash(
             digest_hash(14695981039346656037ull, out, sizeof out), lse,
             sizeof lse));
  for (int i = 0; i < COUNT; i++) {
    free(values[i]);
    free(state_lse[i]);
  }
  return status == FLASHCPU_OK ? 0 : 1;
}

int digest_engine_cases(flashcpu_context *ctx) {
  return quantized_decode(ctx) + sinks_alibi(ctx) + merge(ctx) +
         digest_paged_cases(ctx);
}

/* A context that runs the kernel called name; the place that follows the
 * options' version. */
static flashcpu_status forced_context(const flashcpu_kernel_info *kernel,
                                      int threads, flashcpu_context **ctx) {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.max_isa = kernel->isa;
  options.num_threads = threads;
#if FLASHCPU_VERSION >= 300
  char settings[160];
  snprintf(settings, sizeof settings, "kernel = %s", kernel->name);
  options.settings = settings;
#else
  options.kernel = kernel->name;
#endif
  return flashcpu_context_create(&options, ctx);
}

int digest_forced_cases(int threads) {
  int failures = 0;
  flashcpu_kernel_info kernel;
#if FLASHCPU_VERSION >= 300
  flashcpu_kernel_info_init(&kernel);
#endif
  for (int i = 0; flashcpu_kernel_info_get(i, &kernel); i++) {
    if (!kernel.runnable) continue;
    flashcpu_context *ctx = NULL;
    if (forced_context(&kernel, threads, &ctx) != FLASHCPU_OK) {
      fprintf(stderr, "context for %s: %s\n", kernel.name,
              flashcpu_last_error(NULL));
      failures++;
      continue;
    }
    printf("-- kernel = %s\n", kernel.name);
    digest_forced = 1;
    failures += digest_table_cases(ctx) + digest_engine_cases(ctx);
    digest_forced = 0;
    flashcpu_context_destroy(ctx);
  }
  return failures;
}
