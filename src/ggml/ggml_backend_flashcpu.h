/* flashcpu's ggml backend: the parts that read ggml tensors
 * (ggml_backend_compute.c) and the backend, device and registry
 * interfaces ggml loads (ggml_backend_flashcpu.c). Compiled against the
 * ggml headers of the tree named by FLASHCPU_GGML. */
#ifndef FLASHCPU_GGML_BACKEND_FLASHCPU_H
#define FLASHCPU_GGML_BACKEND_FLASHCPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"
#include "ggml-backend-impl.h"
#include "ggml.h"

/* How flashcpu's calls get their threads (FLASHCPU_GGML_LAUNCH). */
typedef enum fcg_launch {
  FCG_LAUNCH_HOST = 0, /* the process's OpenMP threads, ggml's with them */
  FCG_LAUNCH_POOL = 1  /* flashcpu's own pinned pool */
} fcg_launch;

/* Time spent in flash attention, by query rows, keys (rounded up to a
 * multiple of 256, llama.cpp's padding of its cache views) and the form
 * the mask took (ggml_mapping.h), for
 * FLASHCPU_GGML_PROFILE=1: printed to stderr when the backend is freed. */
enum { FCG_PROFILE_BUCKETS = 64 };
typedef struct fcg_profile {
  int on, used;
  struct {
    int64_t rows, keys, calls;
    int mask_kind; /* fcg_mask_kind */
    double seconds;
  } buckets[FCG_PROFILE_BUCKETS];
} fcg_profile;

/* One backend (stream): contexts per thread count, and the scratch of the
 * mask copies and key lengths, grown as ops need. */
enum { FCG_CONTEXT_SLOTS = 4 };
typedef struct fcg_backend {
  int n_threads; /* from ggml_backend_set_n_threads; 0: flashcpu's default */
  fcg_launch launch;
  struct {
    int threads;
    flashcpu_context *ctx;
  } contexts[FCG_CONTEXT_SLOTS];
  int next_slot;
  float *mask_copy;
  size_t mask_copy_floats;
  int64_t *kv_lengths;
  size_t kv_lengths_count;
  fcg_profile profile;
} fcg_backend;

/* Whether the backend computes op: GGML_OP_FLASH_ATTN_EXT that flashcpu
 * computes exactly, on host memory, and the view ops around it. */
bool fcg_backend_supports_op(const struct ggml_tensor *op);

/* Computes one GGML_OP_FLASH_ATTN_EXT node. */
enum ggml_status fcg_backend_flash_attn(fcg_backend *backend,
                                        struct ggml_tensor *node);

/* Frees the backend's contexts and scratch (not the struct). */
void fcg_backend_release(fcg_backend *backend);

/* Seconds on a monotonic clock. */
double fcg_seconds(void);
/* Adds a call of `rows` query rows over `keys` keys, its mask read as
 * mask_kind (fcg_mask_kind), that took `seconds`. */
void fcg_profile_add(fcg_profile *profile, int64_t rows, int64_t keys,
                     int mask_kind, double seconds);
/* One line per bucket on stderr. */
void fcg_profile_print(const fcg_profile *profile);

/* The launch mode FLASHCPU_GGML_LAUNCH asks for ("host", the default, or
 * "pool"). */
fcg_launch fcg_launch_from_environment(void);

#endif
