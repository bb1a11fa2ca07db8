/* Greedy decoding with llama.cpp, flash attention on, printing the token
 * ids: run once with the flashcpu backend loaded (GGML_BACKEND_PATH) and
 * once without, and compare the lines. The prompt is `--prompt` random
 * token ids (seeded), so that the context reaches any length without a
 * text. Built against a llama.cpp tree by llama_bench_compare.sh.
 *
 *   llama_greedy_tokens -m MODEL [--prompt N] [--gen N] [--kv f32|f16|q8_0]
 *                       [--threads N] [--seed S] [--fa on|off]
 *                       [--logits FILE] [--compare FILE]...
 * prints "tokens: id id ..." (the generated ones) on stdout, and "margins:
 * ..." on stderr: each step's largest logit minus the next, which says how
 * close a step was to another token. --fa off runs llama.cpp's attention
 * without flash attention (f32 scores and softmax): a reference for where
 * two flash-attention runs part. --logits writes the logits after the
 * prompt (n_vocab float32 values) to FILE, to compare runs before any of
 * them picks another token; --compare (up to 4) prints how far they are
 * from the logits another run wrote: "logits vs FILE: max |difference|
 * rms difference (rms of these logits)". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static enum ggml_type kv_type(const char *name) {
  if (!strcmp(name, "f32")) return GGML_TYPE_F32;
  if (!strcmp(name, "q8_0")) return GGML_TYPE_Q8_0;
  return GGML_TYPE_F16;
}

/* The largest logit's token, and its lead over the next largest. */
static llama_token argmax(const float *logits, int n, float *margin) {
  int best = 0, second = -1;
  for (int i = 1; i < n; i++) {
    if (logits[i] > logits[best]) {
      second = best;
      best = i;
    } else if (second < 0 || logits[i] > logits[second]) {
      second = i;
    }
  }
  *margin = second < 0 ? 0.0f : logits[best] - logits[second];
  return best;
}

/* Prints how far `logits` are from those another run wrote to `path`. */
static int compare_logits(const char *path, const float *logits, int n) {
  FILE *file = fopen(path, "rb");
  float *other = malloc((size_t)n * sizeof *other);
  const int ok = file && other &&
                 fread(other, sizeof *other, (size_t)n, file) == (size_t)n;
  if (file) fclose(file);
  if (!ok) {
    fprintf(stderr, "cannot read %d logits from %s\n", n, path);
    free(other);
    return 1;
  }
  double largest = 0.0, squares = 0.0, own = 0.0;
  for (int i = 0; i < n; i++) {
    const double difference = fabs((double)logits[i] - (double)other[i]);
    if (difference > largest) largest = difference;
    squares += difference * difference;
    own += (double)logits[i] * (double)logits[i];
  }
  printf("logits vs %s: max %.4g rms %.4g (rms of these logits %.4g)\n", path,
         largest, sqrt(squares / n), sqrt(own / n));
  free(other);
  return 0;
}

int main(int argc, char **argv) {
  const char *model_path = NULL, *kv = "f32", *flash = "on",
             *logits_path = NULL, *compare[4];
  int compares = 0;
  int prompt = 512, gen = 64, threads = 0;
  unsigned long seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-m"))
      model_path = argv[i + 1];
    else if (!strcmp(argv[i], "--prompt"))
      prompt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gen"))
      gen = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--kv"))
      kv = argv[i + 1];
    else if (!strcmp(argv[i], "--threads"))
      threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed"))
      seed = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--fa"))
      flash = argv[i + 1];
    else if (!strcmp(argv[i], "--logits"))
      logits_path = argv[i + 1];
    else if (!strcmp(argv[i], "--compare") && compares < 4)
      compare[compares++] = argv[i + 1];
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (!model_path || prompt < 1 || gen < 1) {
    fprintf(stderr, "llama_greedy_tokens -m MODEL [--prompt N] [--gen N] "
                    "[--kv f32|f16|q8_0] [--threads N] [--seed S] "
                    "[--fa on|off] [--logits FILE] [--compare FILE]...\n");
    return 2;
  }
  ggml_backend_load_all(); /* reads GGML_BACKEND_PATH */
  llama_backend_init();
  struct llama_model *model =
      llama_model_load_from_file(model_path, llama_model_default_params());
  if (!model) return 1;
  struct llama_context_params params = llama_context_default_params();
  params.n_ctx = (uint32_t)(prompt + gen);
  params.n_batch = params.n_ubatch = 512;
  params.flash_attn_type = strcmp(flash, "off")
                               ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                               : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  params.type_k = params.type_v = kv_type(kv);
  if (threads > 0) params.n_threads = params.n_threads_batch = threads;
  struct llama_context *ctx = llama_init_from_model(model, params);
  if (!ctx) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_token *tokens = malloc((size_t)prompt * sizeof *tokens);
  for (int i = 0; i < prompt; i++) {
    seed = seed * 6364136223846793005ul + 1442695040888963407ul;
    tokens[i] = (llama_token)((seed >> 33) % (unsigned long)(n_vocab - 3)) + 3;
  }
  for (int done = 0; done < prompt; done += 512) {
    const int n = prompt - done < 512 ? prompt - done : 512;
    if (llama_decode(ctx, llama_batch_get_one(tokens + done, n))) return 1;
  }
  if (logits_path) {
    FILE *file = fopen(logits_path, "wb");
    if (!file || fwrite(llama_get_logits_ith(ctx, -1), sizeof(float),
                        (size_t)n_vocab, file) != (size_t)n_vocab)
      return 1;
    fclose(file);
  }
  for (int c = 0; c < compares; c++)
    if (compare_logits(compare[c], llama_get_logits_ith(ctx, -1), n_vocab))
      return 1;
  printf("tokens:");
  float *margins = malloc((size_t)gen * sizeof *margins);
  for (int i = 0; i < gen; i++) {
    llama_token next =
        argmax(llama_get_logits_ith(ctx, -1), n_vocab, &margins[i]);
    printf(" %d", next);
    fflush(stdout);
    if (llama_decode(ctx, llama_batch_get_one(&next, 1))) return 1;
  }
  printf("\n");
  fprintf(stderr, "margins:");
  for (int i = 0; i < gen; i++) fprintf(stderr, " %.4g", (double)margins[i]);
  fprintf(stderr, "\n");
  free(margins);
  free(tokens);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
