/* One decode step the way an inference engine calls flashcpu.
 *
 * Two sequences share a batch. Their KV caches hold up to CAPACITY rows in
 * the [batch, kv head, position, head_dim] (BHSD) layout, stored as bfloat16;
 * the first sequence has 37 rows filled, the second 5 (kv_lengths). Each
 * sequence brings one new query row (L = 1) for 8 query heads that share 2
 * KV heads (GQA). Q and the output are float32, in BSHD.
 *
 * The program checks every output row and log-sum-exp against a plain
 * double-precision softmax over the same bf16-rounded K and V.
 *
 * Build against an installed flashcpu:
 *   cc decode_kv_cache.c $(pkg-config --cflags --libs flashcpu) -lm
 * (tests/install builds and runs it, see tests/install/CMakeLists.txt). */
#include <flashcpu/flashcpu.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, CAPACITY = 64, Q_HEADS = 8, KV_HEADS = 2, HEAD_DIM = 128 };

/* float -> bfloat16, rounding to nearest even (inputs here are finite). */
static uint16_t bf16_from_float(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static float float_from_bf16(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float result;
  memcpy(&result, &bits, sizeof result);
  return result;
}

/* Element (b, h, s, d) of a BHSD cache. */
static size_t cache_index(int b, int h, int s, int d) {
  return (((size_t)b * KV_HEADS + (size_t)h) * CAPACITY + (size_t)s) *
             HEAD_DIM +
         (size_t)d;
}

int main(void) {
  const int64_t kv_lengths[BATCH] = {37, 5};
  const size_t cache_elements = (size_t)BATCH * KV_HEADS * CAPACITY * HEAD_DIM;
  const size_t q_elements = (size_t)BATCH * Q_HEADS * HEAD_DIM;
  uint16_t *k_cache = calloc(cache_elements, sizeof *k_cache);
  uint16_t *v_cache = calloc(cache_elements, sizeof *v_cache);
  float *q = malloc(q_elements * sizeof *q);
  float *out = malloc(q_elements * sizeof *out);
  float lse[BATCH * Q_HEADS];
  if (!k_cache || !v_cache || !q || !out) return 1;

  /* Deterministic pseudo-random values in [-1, 1). */
  uint32_t state = 12345u;
  for (size_t i = 0; i < cache_elements; i++) {
    state = state * 1664525u + 1013904223u;
    k_cache[i] = bf16_from_float((float)(state >> 8) / 8388608.0f - 1.0f);
    state = state * 1664525u + 1013904223u;
    v_cache[i] = bf16_from_float((float)(state >> 8) / 8388608.0f - 1.0f);
  }
  for (size_t i = 0; i < q_elements; i++) {
    state = state * 1664525u + 1013904223u;
    q[i] = (float)(state >> 8) / 8388608.0f - 1.0f;
  }

  flashcpu_context *ctx = NULL;
  if (flashcpu_context_create(NULL, &ctx) != FLASHCPU_OK) {
    fprintf(stderr, "context: %s\n", flashcpu_last_error(NULL));
    return 1;
  }

  /* The caches' dims say CAPACITY rows; kv_lengths says how many are used. */
  flashcpu_tensor tq =
      flashcpu_tensor_bshd(q, FLASHCPU_DTYPE_F32, BATCH, 1, Q_HEADS, HEAD_DIM);
  flashcpu_tensor tk = flashcpu_tensor_bhsd(k_cache, FLASHCPU_DTYPE_BF16, BATCH,
                                            KV_HEADS, CAPACITY, HEAD_DIM);
  flashcpu_tensor tv = flashcpu_tensor_bhsd(v_cache, FLASHCPU_DTYPE_BF16, BATCH,
                                            KV_HEADS, CAPACITY, HEAD_DIM);
  flashcpu_tensor to = flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, BATCH, 1,
                                            Q_HEADS, HEAD_DIM);
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.flags = FLASHCPU_FLAG_CAUSAL; /* with L = 1: every filled row */
  params.kv_lengths = kv_lengths;

  flashcpu_status status =
      flashcpu_attention(ctx, &tq, &tk, &tv, &to, lse, &params);
  if (status != FLASHCPU_OK) {
    fprintf(stderr, "attention: %s: %s\n", flashcpu_status_name(status),
            flashcpu_last_error(ctx));
    return 1;
  }

  /* The reference: softmax(q k^T / sqrt(D)) v in double, per (b, head). */
  double worst = 0.0;
  const double scale = 1.0 / sqrt((double)HEAD_DIM);
  for (int b = 0; b < BATCH; b++) {
    for (int h = 0; h < Q_HEADS; h++) {
      const int kv_head = h / (Q_HEADS / KV_HEADS);
      const float *q_row = q + ((size_t)b * Q_HEADS + (size_t)h) * HEAD_DIM;
      double scores[CAPACITY], max_score = -INFINITY, sum = 0.0;
      for (int s = 0; s < kv_lengths[b]; s++) {
        double dot = 0.0;
        for (int d = 0; d < HEAD_DIM; d++)
          dot += (double)q_row[d] *
                 float_from_bf16(k_cache[cache_index(b, kv_head, s, d)]);
        scores[s] = dot * scale;
        if (scores[s] > max_score) max_score = scores[s];
      }
      for (int s = 0; s < kv_lengths[b]; s++) sum += exp(scores[s] - max_score);
      for (int d = 0; d < HEAD_DIM; d++) {
        double expected = 0.0;
        for (int s = 0; s < kv_lengths[b]; s++)
          expected += exp(scores[s] - max_score) / sum *
                      float_from_bf16(v_cache[cache_index(b, kv_head, s, d)]);
        const double got =
            out[((size_t)b * Q_HEADS + (size_t)h) * HEAD_DIM + (size_t)d];
        if (!(fabs(got - expected) <= worst)) worst = fabs(got - expected);
      }
      const double expected_lse = max_score + log(sum);
      const double lse_error = fabs(lse[b * Q_HEADS + h] - expected_lse);
      if (!(lse_error <= worst)) worst = lse_error;
    }
  }
  printf("decode step: batch %d, kv lengths %lld and %lld of %d, "
         "%d query heads on %d kv heads, bf16 cache\n",
         BATCH, (long long)kv_lengths[0], (long long)kv_lengths[1], CAPACITY,
         Q_HEADS, KV_HEADS);
  printf("largest difference from a float64 softmax: %.3g\n", worst);

  flashcpu_context_destroy(ctx);
  free(k_cache);
  free(v_cache);
  free(q);
  free(out);
  /* float32 accumulation over at most 37 keys: far below 1e-4. */
  return worst <= 1e-4 ? 0 : 1;
}
