/* libflashcpu_mpi's internals: one sharded call's arguments and layout,
 * shared by the checks (mpi_agree.c), the chunk computations
 * (mpi_chunks.c) and the entry points (mpi_attention.c). The component
 * uses only libflashcpu's public API. */
#ifndef FLASHCPU_MPI_INTERNAL_H
#define FLASHCPU_MPI_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flashcpu/flashcpu_mpi.h"

enum { FCM_MESSAGE_SIZE = 512 };

/* ---- messages (mpi_errors.c) */

/* Records a message for flashcpu_mpi_last_error and returns status. */
flashcpu_status fcm_fail(flashcpu_status status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
void fcm_clear_error(void);
const char *fcm_error(void);
/* FLASHCPU_ERROR_INTERNAL naming the MPI function and MPI's message. */
flashcpu_status fcm_mpi_fail(int code, const char *function);

/* A buffer of at least bytes kept with comm between calls (mpi_buffers.c):
 * the previous call's contents are not kept; NULL when out of memory. */
void *fcm_comm_buffer(MPI_Comm comm, size_t bytes);

/* ---- hashing the inputs ranks must share (mpi_agree.c) */

/* FNV-1a over bytes, chained from hash (start: FCM_HASH_SEED). */
#define FCM_HASH_SEED UINT64_C(0xcbf29ce484222325)
uint64_t fcm_hash(uint64_t hash, const void *data, size_t size);

/* ---- one call */

typedef struct fcm_call {
  flashcpu_context *ctx;
  MPI_Comm comm;
  int rank, ranks;
  bool receives; /* this rank gets out and lse */
  int root;      /* -1: every rank */
  int64_t chunk_keys;
  const flashcpu_tensor *q, *k, *v, *out; /* k, v: NULL when paged */
  float *lse;
  /* Paged K/V (NULL: contiguous k and v): this rank's pages and its block
   * table [batch][block_table_stride]. */
  const flashcpu_paged_kv *paged;
  const int32_t *block_table;
  int64_t block_table_stride;
  flashcpu_dtype k_dtype, v_dtype;
  flashcpu_attention_params params; /* a copy, this version's layout */
  int64_t batch, rows, q_heads, head_dim, kv_heads, v_head_dim;
  /* After the exchange of lengths: [ranks][batch] rows of each rank,
   * their first positions, and [batch] totals. */
  int64_t *lengths, *starts, *totals;
} fcm_call;

/* Floats of one chunk's state: out [L, Hq, Dv] then lse [Hq, L]. */
static inline int64_t fcm_record_floats(const fcm_call *call) {
  return call->rows * call->q_heads * (call->v_head_dim + 1);
}

/* Chunks of request b: ceil(total / chunk_keys). */
static inline int64_t fcm_chunks_of(const fcm_call *call, int64_t b) {
  return (call->totals[b] + call->chunk_keys - 1) / call->chunk_keys;
}

/* ---- checks and agreement (mpi_agree.c, mpi_verdicts.c) */

/* What every rank says of its part of a call: a status and its message;
 * the records the ranks exchange start with one. */
typedef struct fcm_verdict {
  int32_t status;
  char message[FCM_MESSAGE_SIZE];
} fcm_verdict;

/* Gathers every rank's record of `size` bytes (starting with an
 * fcm_verdict, filled from local_status and fcm_error() here) into *all,
 * which the caller frees (NULL where the gather failed). Returns the first
 * failing rank's status with its message, else OK. */
flashcpu_status fcm_gather_verdicts(const fcm_call *call, void *mine,
                                    size_t size, flashcpu_status local_status,
                                    void **all);

/* Checks this rank's arguments and fills *call (params copied). Reads
 * only metadata and the small arrays it hashes for the comparison. */
flashcpu_status fcm_check_local(fcm_call *call,
                                const flashcpu_attention_params *params,
                                const flashcpu_mpi_options *options);

/* Exchanges each rank's verdict (status, and on error its message) and
 * what it was given; every rank returns the same status: the first
 * failing rank's, or a disagreement between ranks. local_status is this
 * rank's verdict (its message in fcm_error()). */
flashcpu_status fcm_agree_on_call(fcm_call *call, flashcpu_status local_status);

/* Exchanges the ranks' kv lengths, then checks the ranges (whole chunks)
 * and the tree mask against the totals, identically on every rank. */
flashcpu_status fcm_agree_on_lengths(fcm_call *call);

/* Every rank learns every rank's verdict; returns the first failure's
 * status (its message, prefixed with the rank) or FLASHCPU_OK. */
flashcpu_status fcm_agree(const fcm_call *call, flashcpu_status local_status);

/* ---- paged K/V (mpi_paged.c) */

/* Checks the cache, the block table and the lengths of a paged call, and
 * sets the kv shape fields of *call. */
flashcpu_status fcm_check_paged(fcm_call *call);

/* The spans the paged cache's K and V may touch, for the overlap checks
 * of out (bytes from each data pointer; 0 for none). */
void fcm_paged_extents(const fcm_call *call, uint64_t *k_bytes,
                       uint64_t *v_bytes);

/* flashcpu_attention_paged on keys [begin, end) of request b (this rank's
 * rows from `row`), one request in a plan of its own; the tree mask (may
 * be NULL) becomes the batch's. */
flashcpu_status fcm_paged_chunk(const fcm_call *call, int64_t b, int64_t row,
                                int64_t keys, const flashcpu_tensor *q,
                                const flashcpu_tensor *out, float *lse,
                                flashcpu_attention_params *params,
                                const flashcpu_tree_mask *tree);

/* ---- chunks (mpi_chunks.c) */

/* Whether some query row of request b can see a key of [begin, end)
 * through the causal mask and the window. */
bool fcm_chunk_visible(const fcm_call *call, int64_t b, int64_t begin,
                       int64_t end);

/* Chunks [*first, *first + *count) of request b that rank r owns. */
void fcm_owned_chunks(const fcm_call *call, int r, int64_t b, int64_t *first,
                      int64_t *count);

/* Computes chunk c of request b (owned by this rank) into record. */
flashcpu_status fcm_compute_chunk(const fcm_call *call, int64_t b, int64_t c,
                                  float *record);

/* Sink logits as f32 lse rows [Hq, L] (each row's value sinks[h]). */
void fcm_sink_lse(const fcm_call *call, float *lse);

#endif
