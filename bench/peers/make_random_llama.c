/* Writes a llama-architecture GGUF model with random weights, shaped like
 * Llama-3-8B's layers (hidden 4096, 32 query heads and 8 KV heads of 128,
 * feed-forward 14336) but with only a few of them, and the tokenizer of a
 * vocab-only GGUF that llama.cpp ships in its models/ folder. For timing
 * llama.cpp with and without the flashcpu backend: the weights mean
 * nothing, the shapes and the work per token are an 8B model's per layer.
 * Built against a llama.cpp tree's ggml (gguf.h) by llama_bench_compare.sh.
 *
 *   make_random_llama --vocab VOCAB.gguf --out MODEL.gguf [--layers N]
 *                     [--type q8_0|f16] [--seed S]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"

enum { EMBED = 4096, HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, FFN = 14336 };

static uint64_t rng_state;

static float uniform(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  const uint64_t x = rng_state * 0x2545f4914f6cdd1dull;
  return (float)(x >> 40) / (float)(1 << 23) - 1.0f;
}

/* A weight [ne0, ne1] of `type`, uniform with the variance 1 / ne0 keeps
 * activations near unit size through the layers. */
static void add_weight(struct ggml_context *ctx, struct gguf_context *gguf,
                       const char *name, enum ggml_type type, int64_t ne0,
                       int64_t ne1, float amplitude) {
  struct ggml_tensor *t = ggml_new_tensor_2d(ctx, type, ne0, ne1);
  ggml_set_name(t, name);
  float *row = malloc((size_t)ne0 * sizeof *row);
  for (int64_t r = 0; r < ne1; r++) {
    for (int64_t c = 0; c < ne0; c++) row[c] = amplitude * uniform();
    char *dst = (char *)t->data + (size_t)r * t->nb[1];
    if (type == GGML_TYPE_F32)
      memcpy(dst, row, (size_t)ne0 * sizeof *row);
    else if (type == GGML_TYPE_F16)
      ggml_fp32_to_fp16_row(row, (ggml_fp16_t *)dst, ne0);
    else
      ggml_quantize_chunk(type, row, dst, 0, 1, ne0, NULL);
  }
  free(row);
  gguf_add_tensor(gguf, t);
}

static void add_norm(struct ggml_context *ctx, struct gguf_context *gguf,
                     const char *name) {
  struct ggml_tensor *t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, EMBED);
  ggml_set_name(t, name);
  for (int i = 0; i < EMBED; i++) ((float *)t->data)[i] = 1.0f;
  gguf_add_tensor(gguf, t);
}

static int usage(void) {
  fprintf(stderr, "make_random_llama --vocab VOCAB.gguf --out MODEL.gguf "
                  "[--layers N] [--type q8_0|f16] [--seed S]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *vocab_path = NULL, *out_path = NULL;
  int layers = 2;
  enum ggml_type type = GGML_TYPE_Q8_0;
  rng_state = 88172645463325252ull;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--vocab"))
      vocab_path = argv[i + 1];
    else if (!strcmp(argv[i], "--out"))
      out_path = argv[i + 1];
    else if (!strcmp(argv[i], "--layers"))
      layers = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed"))
      rng_state += strtoull(argv[i + 1], NULL, 10) * 0x9e3779b97f4a7c15ull;
    else if (!strcmp(argv[i], "--type"))
      type = !strcmp(argv[i + 1], "f16") ? GGML_TYPE_F16 : GGML_TYPE_Q8_0;
    else
      return usage();
  }
  if (!vocab_path || !out_path || layers < 1) return usage();

  struct gguf_init_params vocab_params = {true, NULL};
  struct gguf_context *vocab = gguf_init_from_file(vocab_path, vocab_params);
  if (!vocab) {
    fprintf(stderr, "cannot read %s\n", vocab_path);
    return 1;
  }
  const int64_t tokens_key = gguf_find_key(vocab, "tokenizer.ggml.tokens");
  if (tokens_key < 0) {
    fprintf(stderr, "%s has no tokenizer.ggml.tokens\n", vocab_path);
    return 1;
  }
  const int64_t n_vocab = (int64_t)gguf_get_arr_n(vocab, tokens_key);

  struct gguf_context *gguf = gguf_init_empty();
  gguf_set_kv(gguf, vocab); /* the tokenizer, and the architecture's name */
  gguf_set_val_str(gguf, "general.architecture", "llama");
  gguf_set_val_str(gguf, "general.name", "random-llama3-8b-layers");
  gguf_set_val_u32(gguf, "llama.context_length", 131072);
  gguf_set_val_u32(gguf, "llama.embedding_length", EMBED);
  gguf_set_val_u32(gguf, "llama.block_count", (uint32_t)layers);
  gguf_set_val_u32(gguf, "llama.feed_forward_length", FFN);
  gguf_set_val_u32(gguf, "llama.attention.head_count", HEADS);
  gguf_set_val_u32(gguf, "llama.attention.head_count_kv", KV_HEADS);
  gguf_set_val_u32(gguf, "llama.rope.dimension_count", HEAD_DIM);
  gguf_set_val_f32(gguf, "llama.rope.freq_base", 500000.0f);
  gguf_set_val_f32(gguf, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  gguf_set_val_u32(gguf, "llama.vocab_size", (uint32_t)n_vocab);

  const size_t bytes_per_layer =
      ggml_row_size(type, EMBED) * (2 * EMBED + 2 * KV_HEADS * HEAD_DIM) +
      ggml_row_size(type, EMBED) * 2 * FFN + ggml_row_size(type, FFN) * EMBED;
  const size_t total = (size_t)layers * bytes_per_layer +
                       2 * ggml_row_size(type, EMBED) * (size_t)n_vocab +
                       (size_t)(2 * layers + 1) * EMBED * 4 +
                       (size_t)(16 * layers + 16) * ggml_tensor_overhead();
  struct ggml_init_params params = {total, NULL, false};
  struct ggml_context *ctx = ggml_init(params);
  if (!ctx) {
    fprintf(stderr, "cannot allocate %zu bytes\n", total);
    return 1;
  }
  const float unit = 1.0f;
  add_weight(ctx, gguf, "token_embd.weight", type, EMBED, n_vocab, unit);
  add_norm(ctx, gguf, "output_norm.weight");
  add_weight(ctx, gguf, "output.weight", type, EMBED, n_vocab,
             sqrtf(3.0f / EMBED));
  const float embed_amplitude = sqrtf(3.0f / EMBED),
              ffn_amplitude = sqrtf(3.0f / FFN);
  for (int l = 0; l < layers; l++) {
    char name[64];
#define LAYER_NAME(what) (snprintf(name, sizeof name, "blk.%d." what, l), name)
    add_norm(ctx, gguf, LAYER_NAME("attn_norm.weight"));
    add_weight(ctx, gguf, LAYER_NAME("attn_q.weight"), type, EMBED,
               HEADS * HEAD_DIM, embed_amplitude);
    add_weight(ctx, gguf, LAYER_NAME("attn_k.weight"), type, EMBED,
               KV_HEADS * HEAD_DIM, embed_amplitude);
    add_weight(ctx, gguf, LAYER_NAME("attn_v.weight"), type, EMBED,
               KV_HEADS * HEAD_DIM, embed_amplitude);
    add_weight(ctx, gguf, LAYER_NAME("attn_output.weight"), type,
               HEADS * HEAD_DIM, EMBED, embed_amplitude);
    add_norm(ctx, gguf, LAYER_NAME("ffn_norm.weight"));
    add_weight(ctx, gguf, LAYER_NAME("ffn_gate.weight"), type, EMBED, FFN,
               embed_amplitude);
    add_weight(ctx, gguf, LAYER_NAME("ffn_up.weight"), type, EMBED, FFN,
               embed_amplitude);
    add_weight(ctx, gguf, LAYER_NAME("ffn_down.weight"), type, FFN, EMBED,
               ffn_amplitude);
#undef LAYER_NAME
  }
  if (!gguf_write_to_file(gguf, out_path, false)) {
    fprintf(stderr, "cannot write %s\n", out_path);
    return 1;
  }
  printf("wrote %s: %d layers, %lld tokens, %s weights\n", out_path, layers,
         (long long)n_vocab, ggml_type_name(type));
  gguf_free(gguf);
  gguf_free(vocab);
  ggml_free(ctx);
  return 0;
}
