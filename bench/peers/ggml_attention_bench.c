/* Times ggml's CPU flash attention (ggml_flash_attn_ext, what llama.cpp runs
 * with flash attention on) on flashcpu's reference shapes, so that the two
 * can be compared on the same host in the same session. ggml is MIT-licensed
 * third-party code and is not part of flashcpu: build_ggml_bench.sh builds
 * this file against a ggml source tree you provide.
 *
 * llama3-8b shapes: 32 query heads, 8 KV heads, head_dim 128, scale
 * 1/sqrt(128); Q f32 (what ggml's attention takes), K and V f16 (llama.cpp's
 * default cache) or q8_0.
 *   decode:  1 query row over kv keys, caches rotated over enough layers to
 *            exceed 1.2 GB (past the last-level cache), as flashcpu_bench
 *   prefill: L = S, causal (an f16 mask of -inf above the diagonal)
 * One line per case:
 *   case=<name> threads=<n> median_ms=<x> min_ms=<x> max_ms=<x> reps=<n>
 * GBps=<x> GFLOPs=<x> GB/s counts the K and V bytes a call reads; GFLOP/s
 * counts 4 * Hq * D per visible (query, key) pair, as flashcpu_bench does.
 *
 *   ggml_attention_bench [--threads N] [--reps N] [--case SUBSTRING]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

enum { HQ = 32, HKV = 8, D = 128 };

typedef struct bench_case {
  const char *name;
  int rows, kv;
  enum ggml_type kv_type;
} bench_case;

static const bench_case CASES[] = {
    {"decode/f16/kv:1024", 1, 1024, GGML_TYPE_F16},
    {"decode/f16/kv:16384", 1, 16384, GGML_TYPE_F16},
    {"decode/f16/kv:32768", 1, 32768, GGML_TYPE_F16},
    {"decode/q8_0/kv:16384", 1, 16384, GGML_TYPE_Q8_0},
    {"prefill/f16/L:2048", 2048, 2048, GGML_TYPE_F16},
    {"prefill/f16/L:4096", 4096, 4096, GGML_TYPE_F16},
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void fill(struct ggml_tensor *t, unsigned *seed) {
  const int64_t n = ggml_nelements(t);
  float *values = malloc((size_t)n * sizeof *values);
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    values[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  if (t->type == GGML_TYPE_F32) {
    memcpy(t->data, values, (size_t)n * sizeof *values);
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(values, t->data, n);
  } else { /* quantized, a row (of ne[0] values) at a time */
    ggml_quantize_chunk(t->type, values, t->data, 0, n / t->ne[0], t->ne[0],
                        NULL);
  }
  free(values);
}

static void run_case(const bench_case *c, int threads, int reps) {
  const int decode = c->rows == 1;
  const size_t kv_bytes =
      2 * ggml_row_size(c->kv_type, D) * (size_t)c->kv * HKV;
  int layers = decode ? (int)((1200u << 20) / kv_bytes) + 1 : 1;
  if (layers > 256) layers = 256;
  const size_t memory = (size_t)layers * (kv_bytes + 4 * 1024 * 1024) +
                        (size_t)c->rows * HQ * D * 8 +
                        (size_t)c->kv * c->rows * 2 +
                        (size_t)(256 + 64 * threads) * 1024 * 1024; /* + work */
  struct ggml_init_params params = {memory, NULL, false};
  struct ggml_context *ctx = ggml_init(params);
  if (!ctx) {
    fprintf(stderr, "%s: cannot allocate %zu bytes\n", c->name, memory);
    return;
  }
  unsigned seed = 12345;
  struct ggml_tensor *q =
      ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, c->rows, HQ, 1);
  fill(q, &seed);
  struct ggml_tensor *mask = NULL;
  int64_t pairs = (int64_t)c->rows * c->kv;
  if (!decode) { /* bottom-right causal: row i sees keys j <= i + kv - rows */
    mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, c->kv, c->rows, 1, 1);
    ggml_fp16_t *m = mask->data;
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f),
                      hidden = ggml_fp32_to_fp16(-INFINITY);
    pairs = 0;
    for (int i = 0; i < c->rows; i++)
      for (int j = 0; j < c->kv; j++) {
        const int visible = j <= i + c->kv - c->rows;
        m[(size_t)i * c->kv + j] = visible ? zero : hidden;
        pairs += visible;
      }
  }
  struct ggml_cgraph **graphs = malloc((size_t)layers * sizeof *graphs);
  struct ggml_tensor **outs = malloc((size_t)layers * sizeof *outs);
  for (int layer = 0; layer < layers; layer++) {
    struct ggml_tensor *k =
        ggml_new_tensor_4d(ctx, c->kv_type, D, c->kv, HKV, 1);
    struct ggml_tensor *v =
        ggml_new_tensor_4d(ctx, c->kv_type, D, c->kv, HKV, 1);
    fill(k, &seed);
    fill(v, &seed);
    outs[layer] = ggml_flash_attn_ext(ctx, q, k, v, mask,
                                      1.0f / sqrtf((float)D), 0.0f, 0.0f);
    graphs[layer] = ggml_new_graph(ctx);
    ggml_build_forward_expand(graphs[layer], outs[layer]);
  }
  ggml_graph_compute_with_ctx(ctx, graphs[0], threads); /* warm-up */
  double *times = malloc((size_t)reps * sizeof *times);
  for (int r = 0; r < reps; r++) {
    const double start = now();
    ggml_graph_compute_with_ctx(ctx, graphs[r % layers], threads);
    times[r] = now() - start;
  }
  qsort(times, (size_t)reps, sizeof *times, by_value);
  const double median = times[reps / 2];
  const float *out = outs[0]->data;
  printf("case=%s threads=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f reps=%d "
         "GBps=%.2f "
         "GFLOPs=%.2f layers=%d checksum=%.6f\n",
         c->name, threads, 1e3 * median, 1e3 * times[0], 1e3 * times[reps - 1],
         reps, (double)kv_bytes / median * 1e-9,
         4.0 * HQ * D * (double)pairs / median * 1e-9, layers,
         (double)out[0] + out[1]);
  fflush(stdout);
  free(times);
  free(outs);
  free(graphs);
  ggml_free(ctx);
}

int main(int argc, char **argv) {
  int threads = 0, reps = 0;
  const char *only = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads"))
      threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--case"))
      only = argv[i + 1];
  }
  if (threads <= 0) threads = 1;
  ggml_cpu_init();
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    if (only && !strstr(CASES[i].name, only)) continue;
    const int n = reps > 0 ? reps : CASES[i].rows == 1 ? 200 : 5;
    run_case(&CASES[i], threads, n);
  }
  return 0;
}
