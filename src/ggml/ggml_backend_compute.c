/* GGML_OP_FLASH_ATTN_EXT nodes read into ggml_mapping.h's descriptions and
 * run as flashcpu_attention calls on the backend's contexts. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "ggml/ggml_backend_flashcpu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml/ggml_mapping.h"

/* The mapping speaks ggml's type and precision codes without its headers. */
_Static_assert((int)FCG_TYPE_F32 == (int)GGML_TYPE_F32, "ggml type code");
_Static_assert((int)FCG_TYPE_F16 == (int)GGML_TYPE_F16, "ggml type code");
_Static_assert((int)FCG_TYPE_BF16 == (int)GGML_TYPE_BF16, "ggml type code");
_Static_assert((int)FCG_TYPE_Q8_0 == (int)GGML_TYPE_Q8_0, "ggml type code");
_Static_assert((int)FCG_PREC_DEFAULT == (int)GGML_PREC_DEFAULT,
               "ggml precision");
_Static_assert((int)FCG_PREC_F32 == (int)GGML_PREC_F32, "ggml precision");

/* The f32 mask copy of one call stays under this (ALiBi over a general
 * mask: a plane per head); heads are cut into calls to keep it there. */
#define FCG_MASK_COPY_BUDGET ((size_t)64 << 20)

static fcg_tensor describe(const struct ggml_tensor *t) {
  fcg_tensor d;
  d.data = t->data;
  d.type = (int32_t)t->type;
  for (int i = 0; i < 4; i++) {
    d.ne[i] = t->ne[i];
    d.nb[i] = t->nb[i];
  }
  return d;
}

/* op as the mapping's description; mask and sinks are filled and pointed
 * to when present. */
static void describe_op(const struct ggml_tensor *op, fcg_flash_attn *fa,
                        fcg_tensor *mask, fcg_tensor *sinks) {
  memset(fa, 0, sizeof *fa);
  fa->q = describe(op->src[0]);
  fa->k = describe(op->src[1]);
  fa->v = describe(op->src[2]);
  fa->out = describe(op);
  if (op->src[3]) {
    *mask = describe(op->src[3]);
    fa->mask = mask;
  }
  if (op->src[4]) {
    *sinks = describe(op->src[4]);
    fa->sinks = sinks;
  }
  memcpy(&fa->scale, &op->op_params[0], sizeof(float));
  memcpy(&fa->max_bias, &op->op_params[1], sizeof(float));
  memcpy(&fa->logit_softcap, &op->op_params[2], sizeof(float));
  fa->precision = op->op_params[3];
}

static bool in_host_memory(const struct ggml_tensor *t) {
  const struct ggml_tensor *base = t->view_src ? t->view_src : t;
  return !base->buffer || ggml_backend_buffer_is_host(base->buffer);
}

bool fcg_backend_supports_op(const struct ggml_tensor *op) {
  switch (op->op) {
  case GGML_OP_NONE:
  case GGML_OP_RESHAPE:
  case GGML_OP_VIEW:
  case GGML_OP_PERMUTE:
  case GGML_OP_TRANSPOSE:
    return true;
  case GGML_OP_FLASH_ATTN_EXT:
    break;
  default:
    return false;
  }
  if (!op->src[0] || !op->src[1] || !op->src[2]) return false;
  for (int i = 0; i < 5; i++)
    if (op->src[i] && !in_host_memory(op->src[i])) return false;
  fcg_flash_attn fa;
  fcg_tensor mask, sinks;
  describe_op(op, &fa, &mask, &sinks);
  char why[256];
  const bool supported = fcg_supports(&fa, why, sizeof why);
  if (!supported && getenv("FLASHCPU_VERBOSE"))
    fprintf(stderr, "flashcpu ggml backend: declines %s: %s\n", op->name, why);
  return supported;
}

/* host by default: on llama.cpp's steps it was faster than the pool in
 * every measured case (docs/ggml.md), since ggml's OpenMP threads and
 * flashcpu's pinned ones otherwise take turns on the same cores. */
fcg_launch fcg_launch_from_environment(void) {
  const char *value = getenv("FLASHCPU_GGML_LAUNCH");
  if (value && strcmp(value, "pool") == 0) return FCG_LAUNCH_POOL;
  if (value && value[0] && strcmp(value, "host") != 0)
    fprintf(stderr,
            "flashcpu ggml backend: FLASHCPU_GGML_LAUNCH=%s is not "
            "pool or host; using host\n",
            value);
  return FCG_LAUNCH_HOST;
}

/* The process's OpenMP runtime, as flashcpu's host_openmp takes it: the
 * one ggml's CPU backend runs on when it was built with OpenMP. */
static bool host_openmp(flashcpu_host_openmp *host) {
  union {
    void *symbol;
    void (*parallel)(void (*)(void *), void *, unsigned, unsigned);
    int (*query)(void);
  } parallel, thread_num, num_threads;
  parallel.symbol = dlsym(RTLD_DEFAULT, "GOMP_parallel");
  thread_num.symbol = dlsym(RTLD_DEFAULT, "omp_get_thread_num");
  num_threads.symbol = dlsym(RTLD_DEFAULT, "omp_get_num_threads");
  if (!parallel.symbol || !thread_num.symbol || !num_threads.symbol)
    return false;
  host->parallel = parallel.parallel;
  host->thread_num = thread_num.query;
  host->num_threads = num_threads.query;
  return true;
}

/* The context for the backend's thread count, made on first use and kept
 * (a few thread counts: llama.cpp switches between its batch and
 * generation counts). */
static flashcpu_context *context_for(fcg_backend *b) {
  for (int i = 0; i < FCG_CONTEXT_SLOTS; i++)
    if (b->contexts[i].ctx && b->contexts[i].threads == b->n_threads)
      return b->contexts[i].ctx;
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = b->n_threads;
  flashcpu_host_openmp host;
  if (b->launch == FCG_LAUNCH_HOST) {
    if (host_openmp(&host))
      options.host_openmp = &host;
    else
      fprintf(stderr, "flashcpu ggml backend: no OpenMP runtime in the "
                      "process; using flashcpu's pool\n");
  }
  flashcpu_context *ctx = NULL;
  if (flashcpu_context_create(&options, &ctx) != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu ggml backend: %s\n", flashcpu_last_error(NULL));
    return NULL;
  }
  const int slot = b->next_slot;
  b->next_slot = (slot + 1) % FCG_CONTEXT_SLOTS;
  flashcpu_context_destroy(b->contexts[slot].ctx);
  b->contexts[slot].ctx = ctx;
  b->contexts[slot].threads = b->n_threads;
  return ctx;
}

/* buffer grown to hold `needed` elements (one at least); NULL, the buffer
 * kept, when it cannot grow. */
static void *grown(void *buffer, size_t *count, size_t needed, size_t element) {
  if (needed == 0) needed = 1;
  if (buffer && needed <= *count) return buffer;
  void *bigger = realloc(buffer, needed * element);
  if (bigger) *count = needed;
  return bigger;
}

enum ggml_status fcg_backend_flash_attn(fcg_backend *b,
                                        struct ggml_tensor *node) {
  fcg_flash_attn fa;
  fcg_tensor mask, sinks;
  describe_op(node, &fa, &mask, &sinks);
  if (ggml_nelements(node) == 0) return GGML_STATUS_SUCCESS;
  flashcpu_context *ctx = context_for(b);
  if (!ctx) return GGML_STATUS_FAILED;
  /* The profile leaves out a context's creation, once per thread count. */
  const double start = b->profile.on ? fcg_seconds() : 0.0;
  int64_t *lengths = grown(b->kv_lengths, &b->kv_lengths_count,
                           (size_t)fa.q.ne[3], sizeof *lengths);
  if (!lengths) return GGML_STATUS_ALLOC_FAILED;
  b->kv_lengths = lengths;
  fcg_plan plan;
  fcg_plan_op(&fa, FCG_MASK_COPY_BUDGET, b->kv_lengths, &plan);
  float *copy =
      grown(b->mask_copy, &b->mask_copy_floats, plan.copy_floats, sizeof *copy);
  if (!copy) return GGML_STATUS_ALLOC_FAILED;
  b->mask_copy = copy;
  for (int64_t head = 0; head < fa.q.ne[2]; head += plan.heads_per_call) {
    fcg_call call;
    fcg_map(&fa, &plan, b->kv_lengths, head, b->mask_copy, &call);
    if (flashcpu_attention(ctx, &call.q, &call.k, &call.v, &call.out, NULL,
                           &call.params) != FLASHCPU_OK) {
      fprintf(stderr, "flashcpu ggml backend: %s: %s\n", node->name,
              flashcpu_last_error(ctx));
      return GGML_STATUS_FAILED;
    }
  }
  if (b->profile.on)
    fcg_profile_add(&b->profile, fa.q.ne[1], fa.k.ne[1], (int)plan.mask_kind,
                    fcg_seconds() - start);
  return GGML_STATUS_SUCCESS;
}

void fcg_backend_release(fcg_backend *b) {
  fcg_profile_print(&b->profile);
  for (int i = 0; i < FCG_CONTEXT_SLOTS; i++)
    flashcpu_context_destroy(b->contexts[i].ctx);
  free(b->mask_copy);
  free(b->kv_lengths);
}
