/* A consumer of the installed flashcpu package (tests/install).
 *
 * Checks what must hold for any build of the library, exactly:
 *  - the header it compiled against and the library it linked agree on the
 *    version;
 *  - Q = 0 makes every score 0, so each output row is the plain mean of the
 *    V rows its batch can see, and lse is ln(visible keys). With 8 and 4
 *    visible keys (powers of two) the means are exact in float32. V encodes
 *    (batch, kv head, key, dim), so a wrong GQA mapping, kv length or head
 *    stride shows up as a wrong value;
 *  - a NULL argument returns a status and a message, and writes nothing.
 *
 * Written in the common subset of C99 and C++ so that consumer.cpp can
 * compile the same file as C++. Exit status 0: pass; 1: a check failed. */
#include <flashcpu/flashcpu.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
  BATCH = 2,
  Q_LEN = 3,
  KV_CAPACITY = 8,
  Q_HEADS = 4,
  KV_HEADS = 2,
  HEAD_DIM = 16
};

static float q[BATCH][Q_LEN][Q_HEADS][HEAD_DIM];
static float k[BATCH][KV_CAPACITY][KV_HEADS][HEAD_DIM];
static float v[BATCH][KV_CAPACITY][KV_HEADS][HEAD_DIM];
static float out[BATCH][Q_LEN][Q_HEADS][HEAD_DIM];
static float lse[BATCH][Q_HEADS][Q_LEN];

static int failures = 0;

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "consumer: FAILED: %s\n", what);
    failures++;
  }
}

/* The value V holds at (batch b, key s, kv head h, dim d): small integers,
 * exact in float32 and in sums of up to 8 of them. */
static float v_value(int b, int s, int h, int d) {
  return (float)(1000 * b + 100 * h + 10 * s + d);
}

int main(void) {
  printf("consumer: flashcpu %s (header %s)\n", flashcpu_version_string(),
         FLASHCPU_VERSION_STRING);
  check(flashcpu_version() == FLASHCPU_VERSION,
        "flashcpu_version() equals FLASHCPU_VERSION of the header");
  check(strcmp(flashcpu_version_string(), FLASHCPU_VERSION_STRING) == 0,
        "flashcpu_version_string() equals FLASHCPU_VERSION_STRING");

  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = 2;
  flashcpu_context *ctx = NULL;
  flashcpu_status status = flashcpu_context_create(&options, &ctx);
  if (status != FLASHCPU_OK || ctx == NULL) {
    fprintf(stderr, "consumer: FAILED: flashcpu_context_create: %s: %s\n",
            flashcpu_status_name(status), flashcpu_last_error(NULL));
    return 1;
  }
  check(flashcpu_context_num_threads(ctx) == 2, "context has 2 threads");

  for (int b = 0; b < BATCH; b++)
    for (int s = 0; s < KV_CAPACITY; s++)
      for (int h = 0; h < KV_HEADS; h++)
        for (int d = 0; d < HEAD_DIM; d++) {
          k[b][s][h][d] = (float)((s * 7 + d * 3 + h) % 11) - 5.0f;
          v[b][s][h][d] = v_value(b, s, h, d);
        }
  /* q stays 0 (static storage); out and lse start as NaN so that a row the
   * library forgets to write fails. */
  for (size_t i = 0; i < sizeof out / sizeof(float); i++)
    (&out[0][0][0][0])[i] = NAN;
  for (size_t i = 0; i < sizeof lse / sizeof(float); i++)
    (&lse[0][0][0])[i] = NAN;

  flashcpu_tensor tq = flashcpu_tensor_bshd(&q[0][0][0][0], FLASHCPU_DTYPE_F32,
                                            BATCH, Q_LEN, Q_HEADS, HEAD_DIM);
  flashcpu_tensor tk =
      flashcpu_tensor_bshd(&k[0][0][0][0], FLASHCPU_DTYPE_F32, BATCH,
                           KV_CAPACITY, KV_HEADS, HEAD_DIM);
  flashcpu_tensor tv =
      flashcpu_tensor_bshd(&v[0][0][0][0], FLASHCPU_DTYPE_F32, BATCH,
                           KV_CAPACITY, KV_HEADS, HEAD_DIM);
  flashcpu_tensor tout = flashcpu_tensor_bshd(
      &out[0][0][0][0], FLASHCPU_DTYPE_F32, BATCH, Q_LEN, Q_HEADS, HEAD_DIM);

  const int64_t kv_lengths[BATCH] = {8, 4};
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.kv_lengths = kv_lengths;

  status =
      flashcpu_attention(ctx, &tq, &tk, &tv, &tout, &lse[0][0][0], &params);
  if (status != FLASHCPU_OK) {
    fprintf(stderr, "consumer: FAILED: flashcpu_attention: %s: %s\n",
            flashcpu_status_name(status), flashcpu_last_error(ctx));
    flashcpu_context_destroy(ctx);
    return 1;
  }

  int wrong = 0;
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i < Q_LEN; i++)
      for (int h = 0; h < Q_HEADS; h++) {
        const int kv_head = h / (Q_HEADS / KV_HEADS); /* GQA */
        const int visible = (int)kv_lengths[b];
        for (int d = 0; d < HEAD_DIM; d++) {
          float sum = 0.0f;
          for (int s = 0; s < visible; s++) sum += v_value(b, s, kv_head, d);
          const float mean = sum / (float)visible; /* exact: 8 and 4 */
          if (!(out[b][i][h][d] == mean) && wrong++ < 5)
            fprintf(stderr,
                    "consumer: out[b=%d][row=%d][head=%d][dim=%d] is %.9g, "
                    "expected the mean of V rows 0..%d: %.9g\n",
                    b, i, h, d, (double)out[b][i][h][d], visible - 1,
                    (double)mean);
        }
        const double expected_lse = log((double)visible);
        if (!(fabs((double)lse[b][h][i] - expected_lse) <= 1e-6) && wrong++ < 5)
          fprintf(stderr,
                  "consumer: lse[b=%d][head=%d][row=%d] is %.9g, expected "
                  "ln(%d) = %.9g\n",
                  b, h, i, (double)lse[b][h][i], visible, expected_lse);
      }
  check(wrong == 0, "Q = 0 gives the mean of the visible V rows, lse ln(n)");

  /* An error: nothing written, a status and a message. */
  out[0][0][0][0] = -1.0f;
  status = flashcpu_attention(ctx, NULL, &tk, &tv, &tout, NULL, NULL);
  check(status == FLASHCPU_ERROR_NULL_POINTER,
        "q == NULL returns FLASHCPU_ERROR_NULL_POINTER");
  check(strcmp(flashcpu_status_name(status), "NULL_POINTER") == 0,
        "flashcpu_status_name names the status");
  check(flashcpu_last_error(ctx)[0] != '\0', "the error has a message");
  check(out[0][0][0][0] == -1.0f, "a failed call writes nothing");

  flashcpu_context_destroy(ctx);
  flashcpu_context_destroy(NULL);
  if (failures) {
    fprintf(stderr, "consumer: %d check(s) failed\n", failures);
    return 1;
  }
  printf("consumer: all checks passed\n");
  return 0;
}
