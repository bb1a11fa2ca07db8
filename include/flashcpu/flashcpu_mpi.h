/*
 * flashcpu_mpi: context parallelism over MPI (libflashcpu_mpi, built where
 * CMake finds MPI; libflashcpu itself does not depend on MPI).
 *
 * A sequence too long for one machine is split across the ranks of a
 * communicator: each rank holds a contiguous range of its positions (its
 * K and V rows), computes attention over them with flashcpu_attention
 * (with the lse output and query_offsets), and the partial results are
 * merged by their log-sum-exp with flashcpu_merge_states, so that every
 * rank (or one root) gets attention over the whole sequence.
 *
 * Decode and speculative verify: flashcpu_mpi_attention (contiguous K/V)
 * and flashcpu_mpi_attention_paged (a paged cache). Every rank passes
 * the same queries and options and its own K/V rows; the call is
 * collective over the communicator (every rank must make it, with the
 * same communicator, in the same order as its other collective calls on
 * it). Only the calling thread calls MPI: MPI_THREAD_FUNNELED is enough.
 * Prefill: flashcpu_mpi_ring_attention (ring attention, below).
 *
 * Positions. Request b's keys are the ranks' rows laid end to end in rank
 * order: rank r's kv_lengths[b] rows hold positions
 *   a_r = sum of kv_lengths[b] over the ranks before r, ..., a_r + n_r - 1
 * of a sequence of S_b = sum over all ranks keys. Every mask is that of
 * one flashcpu_attention call over the S_b keys: causal and windows
 * bottom-right aligned to S_b, ALiBi distances from the same positions, the
 * tree mask over the newest tree_mask->num_keys keys of the sequence (every
 * rank passes the whole mask), sinks joining each row once, GQA, softcap
 * and scale as in one process.
 *
 * Chunks: the keys of each request are cut into chunks of chunk_keys
 * positions ([0, C), [C, 2C), ...; the last may be shorter). Ranks own
 * whole chunks: every rank holding keys of a request must start at a
 * multiple of chunk_keys (so every rank but the last holding keys holds a
 * multiple of chunk_keys). flashcpu_mpi_shard gives balanced ranges.
 *
 * Bytes. The result of request b is, by definition,
 *   flashcpu_merge_states over the states [sink, chunk 0, chunk 1, ...]
 * in that order (the sink state only with params->sinks: out 0, lse
 * sinks[h]), where chunk c's state is flashcpu_attention (out in f32, with
 * lse) on q and that chunk's K/V rows alone, with query_offsets[0] = S_b -
 * (the chunk's end), the tree mask cut to the chunk, the additive mask's
 * and the scales' columns of the chunk, no sinks. (A chunk that no query
 * row can see through the causal mask and the window is not computed: its
 * state is empty either way, and the merge reads no value of an empty
 * state.) So for the same problem, the same chunk_keys, and the same
 * build, ISA and settings on every rank, the output bytes are identical
 * whatever the number of ranks, the split of the chunks among them and
 * the thread count of each rank's context, and identical on every rank
 * that receives them. For one request (B = 1) in a single chunk
 * (chunk_keys >= S), without sinks and with an f32 out, they are the bytes
 * of one flashcpu_attention call over the whole sequence (the merge of one
 * state is exact). The bytes do depend on chunk_keys, and on each rank's
 * ISA and kernel settings (ranks on different CPUs may compute a chunk
 * with different kernels).
 *
 * Errors. Before computing, the ranks exchange what they were given: ranks
 * disagreeing on the shapes, dtypes, options or on q, the sinks, slopes or
 * tree mask (compared by hash), misaligned ranges, or a bad argument on any
 * rank make every rank return the same error status, with a message
 * naming the rank, and write nothing. An error in a rank's computation
 * (flashcpu_attention refusing its K/V views, memory) is exchanged the same
 * way before anything is written (only a merge that runs out of memory on
 * one receiving rank is reported after the others have written). Every
 * rank must call: a rank that never
 * calls leaves the others waiting, as with any MPI collective. MPI errors
 * (under an error handler that returns) give FLASHCPU_ERROR_INTERNAL.
 * Messages: flashcpu_mpi_last_error (per thread).
 */
#ifndef FLASHCPU_FLASHCPU_MPI_H
#define FLASHCPU_FLASHCPU_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keys per chunk when flashcpu_mpi_options.chunk_keys is 0: a chunk is one
 * flashcpu_attention call, so larger chunks spread its fixed cost over
 * more keys; smaller ones balance short sequences better over the ranks. */
#define FLASHCPU_MPI_DEFAULT_CHUNK_KEYS 16384

/* Options of the sharded calls. Set struct_size with
 * flashcpu_mpi_options_init. */
typedef struct flashcpu_mpi_options {
  size_t struct_size;
  /* Positions per chunk, the unit the result's bytes are defined over and
   * the unit of ownership. 0: FLASHCPU_MPI_DEFAULT_CHUNK_KEYS. */
  int64_t chunk_keys;
  /* -1: every rank receives out and lse. A rank number: only that rank
   * does; the others may pass out and lse NULL (they are not written). */
  int root;
} flashcpu_mpi_options;

/* Fills *options with the defaults: chunk_keys 0, root -1. */
FLASHCPU_API void flashcpu_mpi_options_init(flashcpu_mpi_options *options);

/* Attention of the same queries over a sequence whose keys the ranks of
 * comm hold (see above), for a batch of B requests:
 *   q    [B, L, Hq, D]      the same on every rank
 *   k, v [B, S_r, Hkv, D/Dv] this rank's rows; params->kv_lengths, when
 *                           given, is the rows each request has here
 *                           (NULL: S_r each; a rank may hold 0)
 *   out  [B, L, Hq, Dv]     on the ranks that receive: any dtype
 *   lse  float32 [B, Hq, L] on the ranks that receive, or NULL
 * params (NULL: defaults) as for flashcpu_attention, the same on every
 * rank, except kv_lengths, the additive mask (this rank's key columns:
 * [B, Hq, L, S_r]) and k_scales / v_scales (this rank's rows), which are
 * the rank's own; query_offsets must be NULL. ctx is this rank's context.
 * options NULL: the defaults. Returns the same status on every rank. */
FLASHCPU_API flashcpu_status
flashcpu_mpi_attention(flashcpu_context *ctx, MPI_Comm comm,
                       const flashcpu_tensor *q, const flashcpu_tensor *k,
                       const flashcpu_tensor *v, const flashcpu_tensor *out,
                       float *lse, const flashcpu_attention_params *params,
                       const flashcpu_mpi_options *options);

/* The same call with the communicator as a Fortran handle
 * (MPI_Comm_c2f; mpi4py's comm.py2f()), for bindings that cannot pass an
 * MPI_Comm. */
FLASHCPU_API flashcpu_status
flashcpu_mpi_attention_f(flashcpu_context *ctx, MPI_Fint comm,
                         const flashcpu_tensor *q, const flashcpu_tensor *k,
                         const flashcpu_tensor *v, const flashcpu_tensor *out,
                         float *lse, const flashcpu_attention_params *params,
                         const flashcpu_mpi_options *options);

/* The same call over this rank's paged KV cache (flashcpu_paged_kv, as
 * flashcpu_attention_paged reads it, any dtype and layout it takes):
 * request b's local key j is in page block_table[b * block_table_stride +
 * j / page_size], slot j % page_size, for j < params->kv_lengths[b]
 * (required: this rank's keys per request). chunk_keys must be a multiple
 * of the page size (a chunk is whole pages). The scales of quantized pages
 * come from kv: params->k_scales and v_scales must be NULL. The bytes are
 * those of flashcpu_mpi_attention on the same keys held contiguously
 * (flashcpu_attention_paged writes flashcpu_attention's bytes), whatever
 * the page size and the order of the pages. */
FLASHCPU_API flashcpu_status flashcpu_mpi_attention_paged(
    flashcpu_context *ctx, MPI_Comm comm, const flashcpu_tensor *q,
    const flashcpu_paged_kv *kv, const int32_t *block_table,
    int64_t block_table_stride, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params,
    const flashcpu_mpi_options *options);

/* flashcpu_mpi_attention_paged with a Fortran communicator handle. */
FLASHCPU_API flashcpu_status flashcpu_mpi_attention_paged_f(
    flashcpu_context *ctx, MPI_Fint comm, const flashcpu_tensor *q,
    const flashcpu_paged_kv *kv, const int32_t *block_table,
    int64_t block_table_stride, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params,
    const flashcpu_mpi_options *options);

/* Prefill: ring attention over a prompt of S = 2 N Bs tokens spread over
 * the N ranks of comm in zigzag order: the prompt is cut into 2N blocks of
 * Bs rows and rank r holds blocks r and 2N-1-r, so that under the causal
 * mask every rank has the same work. On each rank
 *   q    [B, 2Bs, Hq, D]   rows [0, Bs): block r, [Bs, 2Bs): block 2N-1-r
 *   k, v [B, 2Bs, Hkv, D / Dv] the same blocks' keys and values
 *   out  [B, 2Bs, Hq, Dv]  this rank's rows of the result (any dtype)
 *   lse  float32 [B, Hq, 2Bs] or NULL
 * q, k and v are f32, f16 or bf16 (not quantized). In N steps each rank
 * computes its two query blocks against the two K/V blocks it holds while
 * those travel on to the next rank (non-blocking point-to-point calls with
 * tag 0x4643 on comm), skipping the pairs the causal mask hides, and merges
 * each pair into its query block's result with flashcpu_merge_states.
 * params as for flashcpu_attention, the same on every rank: scale, causal,
 * window, softcap, sinks and ALiBi (positions are the prompt's); tree and
 * additive masks, kv_lengths, query_offsets and scales must be NULL.
 * Bytes: identical for any thread count of each rank, for a given number
 * of ranks. They change with the number of ranks (the blocks, so the sums,
 * are cut differently), within the oracle's tolerance. The call is
 * collective, and errors reach every rank as for flashcpu_mpi_attention.
 * Memory: the K/V blocks in flight and four f32 states of a query block
 * (about 2 x the rank's K/V plus 4 x B Bs Hq (Dv + 1) floats) stay with
 * comm for the next call, so that a prefill does not fault its buffers
 * in again; MPI_Comm_free(comm) (for MPI_COMM_WORLD, MPI_Finalize) frees
 * them. Calls on one communicator do not overlap (MPI's rule for
 * collectives). */
FLASHCPU_API flashcpu_status flashcpu_mpi_ring_attention(
    flashcpu_context *ctx, MPI_Comm comm, const flashcpu_tensor *q,
    const flashcpu_tensor *k, const flashcpu_tensor *v,
    const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params);

/* flashcpu_mpi_ring_attention with a Fortran communicator handle. */
FLASHCPU_API flashcpu_status flashcpu_mpi_ring_attention_f(
    flashcpu_context *ctx, MPI_Fint comm, const flashcpu_tensor *q,
    const flashcpu_tensor *k, const flashcpu_tensor *v,
    const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params);

/* Balanced whole-chunk ranges: the first position *begin and the count
 * *keys of rank `rank` of `ranks` for a sequence of total_keys keys cut
 * into chunks of chunk_keys (0: the default). Ranks get
 * ceil(chunks / ranks) or floor(chunks / ranks) consecutive chunks, the
 * larger shares first; the last chunk may be short. */
FLASHCPU_API flashcpu_status flashcpu_mpi_shard(int64_t total_keys,
                                                int64_t chunk_keys, int rank,
                                                int ranks, int64_t *begin,
                                                int64_t *keys);

/* The message of the last failed flashcpu_mpi_* call on this thread (""
 * after a successful one). */
FLASHCPU_API const char *flashcpu_mpi_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCPU_FLASHCPU_MPI_H */
