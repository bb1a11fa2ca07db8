/* flashcpu_output_digest: a fingerprint of the output bytes of every kernel
 * path, to show that a change to the code leaves results untouched.
 *
 * It runs a fixed list of problems (decode, verify and prefill shapes; every
 * dtype; causal, window, tree, additive and softcap options; GQA; kv lengths;
 * odd head dims; the shapes the AMX kernels take; quantized caches, a paged
 * serving step, sinks, ALiBi and a merge: output_digest_engine.c and
 * output_digest_paged.c) at every ISA the CPU supports, with fixed
 * pseudo-random inputs, and prints one line per problem and ISA with a
 * 64-bit FNV-1a hash of out and lse and the kernels that ran. It uses only the
 * public API, so the same source builds against an older flashcpu: run both and
 * diff the outputs. Which kernel a problem takes follows the context's settings
 * (a tune file through FLASHCPU_TUNE_FILE); the bytes of a kernel never depend
 * on the thread count, which the second argument sets. flashcpu_output_digest
 * [threads]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output_digest.h"

typedef struct digest_case {
  const char *name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, dim;
  flashcpu_dtype q_dtype, kv_dtype, out_dtype;
  int causal;
  int64_t window_left, window_right;
  float softcap;
  int tree, additive, kv_lengths;
} digest_case;

static const digest_case cases[] = {
    {"decode-f32", 1, 1, 1000, 8, 2, 128, 0, 0, 0, 1, -1, -1, 0, 0, 0, 0},
    {"decode-bf16", 2, 1, 777, 32, 8, 128, 2, 2, 2, 1, -1, -1, 0, 0, 0, 1},
    {"decode-f16", 1, 1, 300, 4, 1, 64, 1, 1, 0, 1, -1, -1, 0, 0, 0, 0},
    {"decode-bf16-q-f32", 1, 1, 515, 14, 2, 64, 0, 2, 2, 1, -1, -1, 0, 0, 0, 0},
    {"decode-d80-window", 1, 1, 400, 6, 2, 80, 2, 2, 0, 1, 100, 0, 0, 0, 0, 0},
    {"decode-d100-softcap", 1, 1, 333, 4, 4, 100, 0, 1, 1, 1, -1, -1, 30.0f, 0,
     0, 0},
    {"decode-additive", 2, 1, 200, 8, 2, 64, 2, 2, 2, 0, -1, -1, 0, 0, 1, 1},
    {"decode-d1", 1, 1, 50, 2, 1, 1, 0, 0, 0, 1, -1, -1, 0, 0, 0, 0},
    {"verify-tree-4", 1, 4, 600, 8, 2, 128, 2, 2, 2, 1, -1, -1, 0, 1, 0, 0},
    {"verify-causal-8", 2, 8, 900, 12, 4, 96, 0, 2, 0, 1, -1, -1, 0, 0, 0, 1},
    {"verify-16", 1, 16, 700, 8, 8, 64, 1, 1, 1, 1, -1, -1, 0, 0, 0, 0},
    {"rows-40-tree", 1, 40, 500, 4, 2, 64, 2, 2, 2, 1, -1, -1, 0, 1, 0, 0},
    {"prefill-f32", 1, 150, 150, 8, 2, 128, 0, 0, 0, 1, -1, -1, 0, 0, 0, 0},
    {"prefill-bf16", 2, 100, 260, 8, 2, 128, 2, 2, 2, 1, -1, -1, 0, 0, 0, 1},
    {"prefill-f16-d72", 1, 97, 97, 6, 3, 72, 1, 1, 1, 1, -1, -1, 0, 0, 0, 0},
    {"prefill-window", 1, 200, 200, 4, 1, 64, 2, 2, 0, 1, 31, 0, 0, 0, 0, 0},
    {"prefill-softcap-add", 1, 64, 128, 4, 2, 256, 0, 0, 0, 0, -1, -1, 50.0f, 0,
     1, 0},
    {"prefill-noncausal", 2, 33, 65, 12, 12, 64, 2, 0, 2, 0, -1, -1, 0, 0, 0,
     0},
    {"prefill-d100", 1, 70, 90, 4, 2, 100, 2, 2, 2, 1, -1, -1, 0, 0, 0, 0},
    /* Shapes the AMX-BF16 decode and prefill kernels take. */
    {"verify-amx-d128", 1, 8, 1000, 32, 8, 128, 2, 2, 2, 1, -1, -1, 0, 0, 0, 0},
    {"verify-amx-d64", 2, 4, 600, 16, 2, 64, 2, 2, 0, 1, -1, -1, 0, 0, 0, 1},
    {"prefill-amx-d128", 1, 256, 256, 8, 2, 128, 2, 2, 2, 1, -1, -1, 0, 0, 0,
     0},
    {"prefill-amx-d64", 1, 256, 300, 4, 4, 64, 2, 2, 0, 1, -1, -1, 0, 0, 0, 0},
};

static uint64_t random_state = 1;
void digest_seed(uint64_t seed) { random_state = seed; }
static float next_value(void) {
  random_state = random_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int)(random_state >> 40) % 2001 - 1000) / 500.0f;
}

static uint16_t to_half_bits(float x, flashcpu_dtype dtype) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  if (dtype == FLASHCPU_DTYPE_BF16) return (uint16_t)(bits >> 16);
  /* f16 of values in [-2, 2] with a 10-bit mantissa, truncated. */
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = (int)((bits >> 23) & 0xff) - 127 + 15;
  if (exponent <= 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((uint32_t)exponent << 10) |
                    ((bits >> 13) & 0x3ffu));
}

void *digest_fill(int64_t count, flashcpu_dtype dtype) {
  const size_t size = flashcpu_dtype_size(dtype);
  char *data = malloc((size_t)count * size);
  for (int64_t i = 0; i < count; i++) {
    const float x = next_value();
    if (dtype == FLASHCPU_DTYPE_F32)
      memcpy(data + i * 4, &x, 4);
    else {
      uint16_t half = to_half_bits(x, dtype);
      memcpy(data + i * 2, &half, 2);
    }
  }
  return data;
}

uint64_t digest_hash(uint64_t hash, const void *data, size_t bytes) {
  const unsigned char *c = data;
  for (size_t i = 0; i < bytes; i++) hash = (hash ^ c[i]) * 1099511628211ull;
  return hash;
}

static int run_case(const digest_case *c, flashcpu_context *ctx) {
  random_state = 12345;
  const int64_t B = c->batch, L = c->q_len, S = c->kv_len, Hq = c->q_heads,
                Hkv = c->kv_heads, D = c->dim;
  void *q = digest_fill(B * L * Hq * D, c->q_dtype);
  void *k = digest_fill(B * S * Hkv * D, c->kv_dtype);
  void *v = digest_fill(B * S * Hkv * D, c->kv_dtype);
  const size_t out_bytes =
      (size_t)(B * L * Hq * D) * flashcpu_dtype_size(c->out_dtype);
  void *out = calloc(1, out_bytes);
  float *lse = calloc((size_t)(B * Hq * L), sizeof(float));
  flashcpu_tensor tq = flashcpu_tensor_bshd(q, c->q_dtype, B, L, Hq, D);
  flashcpu_tensor tk = flashcpu_tensor_bshd(k, c->kv_dtype, B, S, Hkv, D);
  flashcpu_tensor tv = flashcpu_tensor_bshd(v, c->kv_dtype, B, S, Hkv, D);
  flashcpu_tensor to = flashcpu_tensor_bshd(out, c->out_dtype, B, L, Hq, D);
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.flags = c->causal ? FLASHCPU_FLAG_CAUSAL : 0;
  params.window_left = c->window_left;
  params.window_right = c->window_right;
  params.softcap = c->softcap;
  int64_t lengths[4] = {S, S - 37, S - 1, S};
  if (c->kv_lengths) params.kv_lengths = lengths;
  uint64_t tree_bits[64];
  flashcpu_tree_mask tree = {tree_bits, L, L, 1, 0};
  if (c->tree) {
    for (int64_t i = 0; i < L; i++) /* a chain with every third key cut */
      tree_bits[i] = ((i + 1 < 64 ? (1ull << (i + 1)) : 0) - 1) &
                     ~(i > 2 ? 1ull << (i / 3) : 0);
    params.tree_mask = &tree;
  }
  float *mask_values = NULL;
  flashcpu_additive_mask additive;
  if (c->additive) {
    mask_values = malloc((size_t)(L * S) * sizeof(float));
    for (int64_t i = 0; i < L * S; i++)
      mask_values[i] = i % 7 == 0 ? -INFINITY : next_value();
    additive.data = mask_values;
    additive.strides[0] = 0;
    additive.strides[1] = 0;
    additive.strides[2] = S;
    additive.strides[3] = 1;
    params.additive_mask = &additive;
  }
  flashcpu_status status =
      flashcpu_attention(ctx, &tq, &tk, &tv, &to, lse, &params);
  uint64_t hash = 14695981039346656037ull;
  hash = digest_hash(hash, out, out_bytes);
  hash = digest_hash(hash, lse, (size_t)(B * Hq * L) * sizeof(float));
  if (digest_forced && status == FLASHCPU_ERROR_INVALID_ARGUMENT) {
    printf("%-22s %-7s n/a\n", c->name,
           flashcpu_isa_name(flashcpu_context_isa(ctx)));
    status = FLASHCPU_OK;
  } else
    printf("%-22s %-7s %s %016llx %s\n", c->name,
           flashcpu_isa_name(flashcpu_context_isa(ctx)),
           status == FLASHCPU_OK ? "ok   " : flashcpu_status_name(status),
           (unsigned long long)hash,
           status == FLASHCPU_OK ? flashcpu_context_last_kernels(ctx)
                                 : flashcpu_last_error(ctx));
  free(q);
  free(k);
  free(v);
  free(out);
  free(lse);
  free(mask_values);
  return status == FLASHCPU_OK ? 0 : 1;
}

int digest_forced;

int digest_table_cases(flashcpu_context *ctx) {
  int failures = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    failures += run_case(&cases[c], ctx);
  return failures;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 0;
  const flashcpu_isa isas[] = {FLASHCPU_ISA_SCALAR, FLASHCPU_ISA_AVX2,
                               FLASHCPU_ISA_AVX512, FLASHCPU_ISA_NEON};
  int failures = 0;
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
    if (!flashcpu_isa_supported(isas[i])) continue;
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.max_isa = isas[i];
    options.num_threads = threads;
    flashcpu_context *ctx = NULL;
    if (flashcpu_context_create(&options, &ctx) != FLASHCPU_OK) {
      fprintf(stderr, "context: %s\n", flashcpu_last_error(NULL));
      return 1;
    }
    failures += digest_table_cases(ctx) + digest_engine_cases(ctx);
    flashcpu_context_destroy(ctx);
  }
  failures += digest_forced_cases(threads);
  return failures ? 1 : 0;
}
