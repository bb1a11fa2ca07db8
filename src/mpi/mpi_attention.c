/* flashcpu_mpi_attention: agree, compute this rank's chunks, exchange
 * their states, merge each request's states in the fixed order
 * [sink, chunk 0, chunk 1, ...] on the ranks that receive, agree again.
 *
 * Layout of the exchanged states: rank by rank, request by request, the
 * rank's chunks that some row can see, in chunk order. Every rank derives
 * it from the exchanged lengths, so only the states travel. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

#define CALL "flashcpu_mpi_attention"

void flashcpu_mpi_options_init(flashcpu_mpi_options *options) {
  if (!options) return;
  memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->root = -1;
}

flashcpu_status flashcpu_mpi_shard(int64_t total_keys, int64_t chunk_keys,
                                   int rank, int ranks, int64_t *begin,
                                   int64_t *keys) {
  fcm_clear_error();
  if (!begin || !keys)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER,
                    "flashcpu_mpi_shard: begin or keys is NULL");
  if (total_keys < 0 || chunk_keys < 0 || ranks < 1 || rank < 0 ||
      rank >= ranks)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    "flashcpu_mpi_shard: total_keys %lld, chunk_keys %lld, "
                    "rank %d of %d: need total_keys >= 0, chunk_keys >= 0 "
                    "and 0 <= rank < ranks",
                    (long long)total_keys, (long long)chunk_keys, rank, ranks);
  if (!chunk_keys) chunk_keys = FLASHCPU_MPI_DEFAULT_CHUNK_KEYS;
  const int64_t chunks =
      total_keys / chunk_keys + (total_keys % chunk_keys != 0);
  const int64_t share = chunks / ranks, extra = chunks % ranks;
  const int64_t first = rank * share + (rank < extra ? rank : extra);
  const int64_t count = share + (rank < extra);
  const int64_t start = first * chunk_keys;
  int64_t stop = (first + count) * chunk_keys;
  if (stop > total_keys) stop = total_keys;
  *begin = start < total_keys ? start : total_keys;
  *keys = stop > *begin ? stop - *begin : 0;
  return FLASHCPU_OK;
}

/* Where each chunk's state lies in the exchanged buffer: per request, its
 * first entry in *index, and per chunk a record number or -1 (no row sees
 * it, or nobody holds it). Also each rank's record count. */
typedef struct layout {
  int64_t *chunk_base; /* [batch + 1] */
  int64_t *record_of;  /* [all chunks] */
  int64_t *records;    /* [ranks] */
  int64_t *rank_first; /* [ranks]: the rank's first record */
  int64_t total;
} layout;

static void free_layout(layout *l) {
  free(l->chunk_base);
  free(l->record_of);
  free(l->records);
  free(l->rank_first);
}

static flashcpu_status make_layout(const fcm_call *call, layout *l) {
  memset(l, 0, sizeof *l);
  l->chunk_base = malloc((size_t)(call->batch + 1) * sizeof(int64_t));
  l->records = calloc((size_t)call->ranks, sizeof(int64_t));
  l->rank_first = calloc((size_t)call->ranks, sizeof(int64_t));
  if (!l->chunk_base || !l->records || !l->rank_first)
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  l->chunk_base[0] = 0;
  for (int64_t b = 0; b < call->batch; b++)
    l->chunk_base[b + 1] = l->chunk_base[b] + fcm_chunks_of(call, b);
  l->record_of =
      malloc((size_t)(l->chunk_base[call->batch] + 1) * sizeof(int64_t));
  if (!l->record_of)
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  for (int64_t i = 0; i < l->chunk_base[call->batch]; i++) l->record_of[i] = -1;
  int64_t next = 0;
  for (int r = 0; r < call->ranks; r++) {
    l->rank_first[r] = next;
    for (int64_t b = 0; b < call->batch; b++) {
      int64_t first, count;
      fcm_owned_chunks(call, r, b, &first, &count);
      for (int64_t c = first; c < first + count; c++) {
        const int64_t begin = c * call->chunk_keys;
        if (fcm_chunk_visible(call, b, begin, begin + call->chunk_keys))
          l->record_of[l->chunk_base[b] + c] = next++;
      }
    }
    l->records[r] = next - l->rank_first[r];
    if (l->records[r] > INT_MAX)
      return fcm_fail(FLASHCPU_ERROR_SIZE_OVERFLOW,
                      CALL ": rank %d holds %lld chunk states, more than an "
                           "MPI count holds (raise chunk_keys)",
                      r, (long long)l->records[r]);
  }
  l->total = next;
  return FLASHCPU_OK;
}

/* This rank's visible chunks into their records (buffer holds the rank's
 * records from its first). */
static flashcpu_status compute_own(const fcm_call *call, const layout *l,
                                   float *buffer) {
  const int64_t floats = fcm_record_floats(call);
  for (int64_t b = 0; b < call->batch; b++) {
    int64_t first, count;
    fcm_owned_chunks(call, call->rank, b, &first, &count);
    for (int64_t c = first; c < first + count; c++) {
      const int64_t record = l->record_of[l->chunk_base[b] + c];
      if (record < 0) continue;
      float *at = buffer + (record - l->rank_first[call->rank]) * floats;
      const flashcpu_status status = fcm_compute_chunk(call, b, c, at);
      if (status != FLASHCPU_OK) return status;
    }
  }
  return FLASHCPU_OK;
}

/* Every rank's records into `all` (receivers; others send theirs). */
static flashcpu_status exchange(const fcm_call *call, const layout *l,
                                float *all, float *own) {
  const int64_t floats = fcm_record_floats(call);
  if (floats > INT_MAX)
    return fcm_fail(FLASHCPU_ERROR_SIZE_OVERFLOW,
                    CALL ": a chunk state of %lld floats is more than an MPI "
                         "count holds",
                    (long long)floats);
  int *counts = malloc((size_t)call->ranks * sizeof(int));
  int *displacements = malloc((size_t)call->ranks * sizeof(int));
  if (!counts || !displacements) {
    free(counts);
    free(displacements);
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  }
  for (int r = 0; r < call->ranks; r++) {
    counts[r] = (int)l->records[r];
    displacements[r] = (int)l->rank_first[r];
  }
  MPI_Datatype record;
  int code = MPI_Type_contiguous((int)floats, MPI_FLOAT, &record);
  if (code == MPI_SUCCESS) code = MPI_Type_commit(&record);
  if (code == MPI_SUCCESS) {
    const int mine = counts[call->rank];
    if (call->root < 0)
      code = MPI_Allgatherv(MPI_IN_PLACE, 0, record, all, counts, displacements,
                            record, call->comm);
    else if (call->rank == call->root)
      code = MPI_Gatherv(MPI_IN_PLACE, 0, record, all, counts, displacements,
                         record, call->root, call->comm);
    else
      code = MPI_Gatherv(own, mine, record, NULL, NULL, NULL, record,
                         call->root, call->comm);
    MPI_Type_free(&record);
  }
  free(counts);
  free(displacements);
  return code == MPI_SUCCESS ? FLASHCPU_OK
                             : fcm_mpi_fail(code, "gathering the states");
}

/* Request b's states merged into out and lse. empty: a state with lse
 * -inf; sink: the sink state; both share zero values. */
static flashcpu_status merge_request(const fcm_call *call, const layout *l,
                                     const float *all, int64_t b,
                                     const float *zeros, const float *empty_lse,
                                     const float *sink_lse) {
  const int64_t chunks = fcm_chunks_of(call, b);
  const int64_t count = chunks + (sink_lse ? 1 : 0);
  const int64_t states_needed = count > 0 ? count : 1;
  flashcpu_tensor *states = malloc((size_t)states_needed * sizeof *states);
  const float **lses = malloc((size_t)states_needed * sizeof *lses);
  if (!states || !lses) {
    free(states);
    free(lses);
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  }
  const int64_t floats = fcm_record_floats(call);
  const int64_t out_floats = call->rows * call->q_heads * call->v_head_dim;
  int64_t n = 0;
  if (sink_lse || count == 0) {
    states[n] =
        flashcpu_tensor_bshd((void *)zeros, FLASHCPU_DTYPE_F32, 1, call->rows,
                             call->q_heads, call->v_head_dim);
    lses[n++] = sink_lse ? sink_lse : empty_lse;
  }
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t record = l->record_of[l->chunk_base[b] + c];
    const float *at = record >= 0 ? all + record * floats : zeros;
    states[n] =
        flashcpu_tensor_bshd((void *)at, FLASHCPU_DTYPE_F32, 1, call->rows,
                             call->q_heads, call->v_head_dim);
    lses[n++] = record >= 0 ? at + out_floats : empty_lse;
  }
  flashcpu_tensor out = *call->out;
  out.data = (char *)out.data +
             b * out.strides[0] * (int64_t)flashcpu_dtype_size(out.dtype);
  out.dims[0] = 1;
  float *lse = call->lse ? call->lse + b * call->q_heads * call->rows : NULL;
  const flashcpu_status status =
      flashcpu_merge_states(call->ctx, n, states, lses, &out, lse);
  free(states);
  free(lses);
  if (status != FLASHCPU_OK)
    return fcm_fail(status, CALL ": merging request %lld: %s", (long long)b,
                    flashcpu_last_error(call->ctx));
  return FLASHCPU_OK;
}

static flashcpu_status merge_all(const fcm_call *call, const layout *l,
                                 const float *all) {
  const int64_t out_floats = call->rows * call->q_heads * call->v_head_dim;
  const int64_t lse_floats = call->rows * call->q_heads;
  float *zeros = calloc((size_t)out_floats, sizeof(float));
  float *empty_lse = malloc((size_t)lse_floats * sizeof(float));
  float *sink_lse =
      call->params.sinks ? malloc((size_t)lse_floats * sizeof(float)) : NULL;
  flashcpu_status status = FLASHCPU_OK;
  if (!zeros || !empty_lse || (call->params.sinks && !sink_lse))
    status = fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  if (status == FLASHCPU_OK) {
    for (int64_t i = 0; i < lse_floats; i++) empty_lse[i] = -INFINITY;
    if (sink_lse) fcm_sink_lse(call, sink_lse);
  }
  for (int64_t b = 0; b < call->batch && status == FLASHCPU_OK; b++)
    status = merge_request(call, l, all, b, zeros, empty_lse, sink_lse);
  free(zeros);
  free(empty_lse);
  free(sink_lse);
  return status;
}

/* Everything after the first agreement; returns the agreed status. */
static flashcpu_status run(fcm_call *call) {
  flashcpu_status status = fcm_agree_on_lengths(call);
  if (status != FLASHCPU_OK) return status;
  layout l;
  status = make_layout(call, &l);
  const int64_t floats = fcm_record_floats(call);
  const int64_t held = status != FLASHCPU_OK ? 0
                       : call->receives      ? l.total
                                             : l.records[call->rank];
  float *buffer = NULL;
  if (status == FLASHCPU_OK && held > 0) {
    buffer = malloc((size_t)(held * floats) * sizeof(float));
    if (!buffer)
      status = fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY,
                        CALL ": out of memory for %lld chunk states",
                        (long long)held);
  }
  float *own = buffer && call->receives
                   ? buffer + l.rank_first[call->rank] * floats
                   : buffer;
  if (status == FLASHCPU_OK) status = compute_own(call, &l, own);
  /* Nobody exchanges or writes unless every rank computed its part. */
  status = fcm_agree(call, status);
  if (status == FLASHCPU_OK && call->ranks > 1)
    status = exchange(call, &l, buffer, own);
  if (status == FLASHCPU_OK && call->receives)
    status = merge_all(call, &l, buffer);
  status = fcm_agree(call, status);
  free(buffer);
  free_layout(&l);
  return status;
}

/* Both entry points: the communicator's checks, then the call. */
static flashcpu_status attend(fcm_call *call, MPI_Comm comm,
                              const flashcpu_attention_params *params,
                              const flashcpu_mpi_options *options) {
  fcm_clear_error();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": MPI is not initialized (or already finalized)");
  if (comm == MPI_COMM_NULL)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": comm is MPI_COMM_NULL");
  int inter = 0;
  MPI_Comm_test_inter(comm, &inter);
  if (inter)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": comm is an inter-communicator; pass an "
                         "intra-communicator");
  call->comm = comm;
  MPI_Comm_rank(comm, &call->rank);
  MPI_Comm_size(comm, &call->ranks);
  flashcpu_status status = fcm_check_local(call, params, options);
  status = fcm_agree_on_call(call, status);
  if (status == FLASHCPU_OK) status = run(call);
  free(call->lengths);
  free(call->starts);
  free(call->totals);
  if (status == FLASHCPU_OK) fcm_clear_error();
  return status;
}

flashcpu_status flashcpu_mpi_attention(flashcpu_context *ctx, MPI_Comm comm,
                                       const flashcpu_tensor *q,
                                       const flashcpu_tensor *k,
                                       const flashcpu_tensor *v,
                                       const flashcpu_tensor *out, float *lse,
                                       const flashcpu_attention_params *params,
                                       const flashcpu_mpi_options *options) {
  fcm_call call;
  memset(&call, 0, sizeof call);
  call.ctx = ctx;
  call.q = q;
  call.k = k;
  call.v = v;
  call.out = out;
  call.lse = lse;
  return attend(&call, comm, params, options);
}

flashcpu_status flashcpu_mpi_attention_paged(
    flashcpu_context *ctx, MPI_Comm comm, const flashcpu_tensor *q,
    const flashcpu_paged_kv *kv, const int32_t *block_table,
    int64_t block_table_stride, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params,
    const flashcpu_mpi_options *options) {
  /* A NULL kv is a bad argument this rank reports in the exchange. */
  static const flashcpu_paged_kv no_pages;
  fcm_call call;
  memset(&call, 0, sizeof call);
  call.ctx = ctx;
  call.q = q;
  call.paged = kv ? kv : &no_pages;
  call.block_table = block_table;
  call.block_table_stride = block_table_stride;
  call.out = out;
  call.lse = lse;
  return attend(&call, comm, params, options);
}

static int initialized_for_f(void) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT, CALL ": MPI is not initialized");
  return initialized;
}

flashcpu_status
flashcpu_mpi_attention_f(flashcpu_context *ctx, MPI_Fint comm,
                         const flashcpu_tensor *q, const flashcpu_tensor *k,
                         const flashcpu_tensor *v, const flashcpu_tensor *out,
                         float *lse, const flashcpu_attention_params *params,
                         const flashcpu_mpi_options *options) {
  if (!initialized_for_f()) return FLASHCPU_ERROR_INVALID_ARGUMENT;
  return flashcpu_mpi_attention(ctx, MPI_Comm_f2c(comm), q, k, v, out, lse,
                                params, options);
}

flashcpu_status flashcpu_mpi_attention_paged_f(
    flashcpu_context *ctx, MPI_Fint comm, const flashcpu_tensor *q,
    const flashcpu_paged_kv *kv, const int32_t *block_table,
    int64_t block_table_stride, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params,
    const flashcpu_mpi_options *options) {
  if (!initialized_for_f()) return FLASHCPU_ERROR_INVALID_ARGUMENT;
  return flashcpu_mpi_attention_paged(ctx, MPI_Comm_f2c(comm), q, kv,
                                      block_table, block_table_stride, out, lse,
                                      params, options);
}
