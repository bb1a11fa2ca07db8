/* flashcpu_mpi_ring_attention: prefill of a prompt cut into 2N blocks over
 * N ranks in zigzag order (rank r holds blocks r and 2N-1-r, so that under
 * the causal mask every rank has the same work). Each of N steps computes
 * the rank's two query blocks against the two K/V blocks it holds, while
 * those blocks travel on to the next rank (MPI_Isend / MPI_Irecv, tested
 * between the computations so that they progress); each pair's state is
 * merged into its query block's running state with flashcpu_merge_states,
 * in an order fixed by the rank and the number of ranks. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

#define CALL "flashcpu_mpi_ring_attention"

enum { RING_TAG = 0x4643 };

enum ring_field {
  RING_BATCH,
  RING_BLOCK,
  RING_Q_HEADS,
  RING_KV_HEADS,
  RING_HEAD_DIM,
  RING_V_HEAD_DIM,
  RING_Q_DTYPE,
  RING_K_DTYPE,
  RING_V_DTYPE,
  RING_SCALE,
  RING_FLAGS,
  RING_WINDOW_LEFT,
  RING_WINDOW_RIGHT,
  RING_SOFTCAP,
  RING_SINKS,
  RING_SINKS_HASH,
  RING_ALIBI,
  RING_ALIBI_HASH,
  RING_FIELDS
};

static const char *const ring_field_names[RING_FIELDS] = {
    "q's batch",
    "the block (half of q's rows)",
    "q's heads",
    "k and v heads",
    "head_dim",
    "v's head_dim",
    "q's dtype",
    "k's dtype",
    "v's dtype",
    "params->scale (bits)",
    "params->flags",
    "params->window_left",
    "params->window_right",
    "params->softcap (bits)",
    "the sinks (given, dtype)",
    "the sinks' values (hash)",
    "the ALiBi slopes (given, per request)",
    "the ALiBi slopes' values (hash)",
};

typedef struct ring_header {
  int32_t status;
  char message[FCM_MESSAGE_SIZE];
  int64_t signature[RING_FIELDS];
} ring_header;

/* One call's buffers (parts of one kept with the communicator): the K/V
 * blocks held now and arriving (K rows then V rows, packed), and per local
 * query block its running state, a spare and one pair state, each out [B,
 * Bs, Hq, Dv] f32 then lse [B, Hq, Bs]. */
typedef struct ring {
  fcm_call call; /* ctx, comm, rank, ranks, params, q, k, v, out, lse */
  int64_t block;
  size_t k_row, v_row; /* bytes of one packed row (all kv heads) */
  unsigned char *held, *arriving;
  float *running[2], *spare, *pair;
  bool has_state[2];
} ring;

static int64_t bits_of(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}

static bool float_dtype(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32 || dtype == FLASHCPU_DTYPE_F16 ||
         dtype == FLASHCPU_DTYPE_BF16;
}

static flashcpu_status check_view(const flashcpu_tensor *t, const char *name) {
  if (!t || !t->data)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER, CALL ": %s is NULL", name);
  if (!float_dtype(t->dtype))
    return fcm_fail(FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                    CALL ": %s must be f32, f16 or bf16", name);
  for (int d = 0; d < 4; d++)
    if (t->dims[d] < 1 || t->strides[d] < 0)
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": %s->dims[%d] must be >= 1 and its strides "
                           ">= 0",
                      name, d);
  if (t->strides[3] != 1)
    return fcm_fail(FLASHCPU_ERROR_BAD_LAYOUT,
                    CALL ": %s's head_dim must be contiguous", name);
  return FLASHCPU_OK;
}

static uint64_t extent(const flashcpu_tensor *t) {
  uint64_t last = 0;
  for (int d = 0; d < 4; d++)
    last += (uint64_t)(t->dims[d] - 1) * (uint64_t)t->strides[d];
  return (last + 1) * flashcpu_dtype_size(t->dtype);
}

static bool overlap(const void *a, uint64_t a_size, const void *b,
                    uint64_t b_size) {
  const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
  return a0 < b0 + b_size && b0 < a0 + a_size;
}

static flashcpu_status check_local(ring *g,
                                   const flashcpu_attention_params *params) {
  fcm_call *c = &g->call;
  flashcpu_status status;
  if (!c->ctx)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  flashcpu_attention_params_init(&c->params);
  if (params) {
    if (params->struct_size != sizeof *params)
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": params->struct_size is %zu, expected %zu",
                      params->struct_size, sizeof *params);
    c->params = *params;
  }
  const flashcpu_attention_params *p = &c->params;
  if (p->tree_mask || p->additive_mask || p->kv_lengths || p->query_offsets ||
      p->k_scales || p->v_scales)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": tree and additive masks, kv_lengths, query_offsets "
                         "and scales are not taken (a prompt's blocks are "
                         "whole and float)");
  if ((status = check_view(c->q, "q")) || (status = check_view(c->k, "k")) ||
      (status = check_view(c->v, "v")) || (status = check_view(c->out, "out")))
    return status;
  const flashcpu_tensor *q = c->q, *k = c->k, *v = c->v, *out = c->out;
  c->batch = q->dims[0];
  c->q_heads = q->dims[2];
  c->head_dim = q->dims[3];
  c->kv_heads = k->dims[2];
  c->v_head_dim = v->dims[3];
  g->block = q->dims[1] / 2;
  if (q->dims[1] % 2 != 0)
    return fcm_fail(FLASHCPU_ERROR_SHAPE_MISMATCH,
                    CALL ": q has %lld rows; a rank holds two blocks of equal "
                         "size",
                    (long long)q->dims[1]);
  const int64_t expected_out[4] = {c->batch, q->dims[1], c->q_heads,
                                   c->v_head_dim};
  bool fits = k->dims[0] == c->batch && v->dims[0] == c->batch &&
              k->dims[1] == q->dims[1] && v->dims[1] == q->dims[1] &&
              v->dims[2] == k->dims[2] && k->dims[3] == c->head_dim &&
              c->q_heads % c->kv_heads == 0;
  for (int d = 0; d < 4; d++) fits = fits && out->dims[d] == expected_out[d];
  if (!fits)
    return fcm_fail(FLASHCPU_ERROR_SHAPE_MISMATCH,
                    CALL ": q [B, 2Bs, Hq, D], k and v [B, 2Bs, Hkv, D / Dv] "
                         "and out [B, 2Bs, Hq, Dv] do not fit together");
  if (p->sinks && !float_dtype(p->sinks_dtype))
    return fcm_fail(FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                    CALL ": params->sinks_dtype must be f32, f16 or bf16");
  if (p->alibi_slopes && p->alibi_batch_stride != 0 &&
      p->alibi_batch_stride < c->q_heads)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": params->alibi_batch_stride must be 0 or >= Hq");
  const uint64_t lse_bytes =
      (uint64_t)(c->batch * c->q_heads * q->dims[1]) * sizeof(float);
  const flashcpu_tensor *inputs[3] = {q, k, v};
  for (int i = 0; i < 3; i++)
    if (overlap(out->data, extent(out), inputs[i]->data, extent(inputs[i])) ||
        (c->lse &&
         overlap(c->lse, lse_bytes, inputs[i]->data, extent(inputs[i]))))
      return fcm_fail(FLASHCPU_ERROR_OVERLAP,
                      CALL ": out or lse overlaps an input in memory");
  return FLASHCPU_OK;
}

static void sign(const ring *g, int64_t *s) {
  const fcm_call *c = &g->call;
  const flashcpu_attention_params *p = &c->params;
  s[RING_BATCH] = c->batch;
  s[RING_BLOCK] = g->block;
  s[RING_Q_HEADS] = c->q_heads;
  s[RING_KV_HEADS] = c->kv_heads;
  s[RING_HEAD_DIM] = c->head_dim;
  s[RING_V_HEAD_DIM] = c->v_head_dim;
  s[RING_Q_DTYPE] = c->q->dtype;
  s[RING_K_DTYPE] = c->k->dtype;
  s[RING_V_DTYPE] = c->v->dtype;
  s[RING_SCALE] = bits_of(p->scale);
  s[RING_FLAGS] = p->flags;
  s[RING_WINDOW_LEFT] = p->window_left;
  s[RING_WINDOW_RIGHT] = p->window_right;
  s[RING_SOFTCAP] = bits_of(p->softcap);
  s[RING_SINKS] = p->sinks ? 1 + (int64_t)p->sinks_dtype : 0;
  s[RING_SINKS_HASH] =
      p->sinks ? (int64_t)fcm_hash(FCM_HASH_SEED, p->sinks,
                                   (size_t)c->q_heads *
                                       flashcpu_dtype_size(p->sinks_dtype))
               : 0;
  s[RING_ALIBI] = p->alibi_slopes ? 1 + (p->alibi_batch_stride != 0) : 0;
  uint64_t hash = FCM_HASH_SEED;
  const int64_t rows = p->alibi_batch_stride ? c->batch : 1;
  for (int64_t b = 0; p->alibi_slopes && b < rows; b++)
    hash = fcm_hash(hash, p->alibi_slopes + b * p->alibi_batch_stride,
                    (size_t)c->q_heads * sizeof(float));
  s[RING_ALIBI_HASH] = (int64_t)hash;
}

static flashcpu_status allocate(ring *g) {
  const fcm_call *c = &g->call;
  g->k_row =
      (size_t)(c->kv_heads * c->head_dim) * flashcpu_dtype_size(c->k->dtype);
  g->v_row =
      (size_t)(c->kv_heads * c->v_head_dim) * flashcpu_dtype_size(c->v->dtype);
  const size_t rows = (size_t)(c->batch * 2 * g->block);
  const size_t state = (size_t)(c->batch * g->block * c->q_heads) *
                       (size_t)(c->v_head_dim + 1) * sizeof(float);
  if (g->k_row + g->v_row > INT_MAX || rows > INT_MAX)
    return fcm_fail(FLASHCPU_ERROR_SIZE_OVERFLOW,
                    CALL ": the K/V blocks are more than MPI counts hold");
  /* One buffer kept with the communicator: the blocks, then four states,
   * each part on a cache line. */
  const size_t blocks = (rows * (g->k_row + g->v_row) + 63) & ~(size_t)63;
  const size_t states = (state + 63) & ~(size_t)63;
  unsigned char *all = fcm_comm_buffer(c->comm, 2 * blocks + 4 * states);
  if (!all)
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY,
                    CALL ": out of memory for the blocks and states");
  g->held = all;
  g->arriving = c->ranks > 1 ? all + blocks : NULL;
  g->running[0] = (float *)(void *)(all + 2 * blocks);
  g->running[1] = (float *)(void *)(all + 2 * blocks + states);
  g->spare = (float *)(void *)(all + 2 * blocks + 2 * states);
  g->pair = (float *)(void *)(all + 2 * blocks + 3 * states);
  /* Pack this rank's K rows, then its V rows. */
  const flashcpu_tensor *sides[2] = {c->k, c->v};
  unsigned char *to = g->held;
  for (int side = 0; side < 2; side++) {
    const flashcpu_tensor *t = sides[side];
    const size_t width = (size_t)t->dims[3] * flashcpu_dtype_size(t->dtype);
    for (int64_t b = 0; b < c->batch; b++)
      for (int64_t s = 0; s < t->dims[1]; s++)
        for (int64_t h = 0; h < t->dims[2]; h++, to += width)
          memcpy(
              to,
              (const char *)t->data +
                  (b * t->strides[0] + s * t->strides[1] + h * t->strides[2]) *
                      (int64_t)flashcpu_dtype_size(t->dtype),
              width);
  }
  return FLASHCPU_OK;
}

/* Every rank's verdict and signature; the same status on every rank. */
static flashcpu_status agree(ring *g, flashcpu_status local) {
  const fcm_call *c = &g->call;
  ring_header mine;
  memset(&mine, 0, sizeof mine);
  mine.status = local;
  if (local != FLASHCPU_OK)
    snprintf(mine.message, sizeof mine.message, "%s", fcm_error());
  else
    sign(g, mine.signature);
  ring_header *all = malloc((size_t)c->ranks * sizeof *all);
  if (!all)
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY,
                    CALL ": out of memory for the ranks' arguments");
  const int code = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all,
                                 (int)sizeof mine, MPI_BYTE, c->comm);
  flashcpu_status status = FLASHCPU_OK;
  if (code != MPI_SUCCESS) status = fcm_mpi_fail(code, "MPI_Allgather");
  for (int r = 0; r < c->ranks && status == FLASHCPU_OK; r++)
    if (all[r].status != FLASHCPU_OK)
      status = fcm_fail((flashcpu_status)all[r].status, "rank %d: %s", r,
                        all[r].message);
  for (int r = 1; r < c->ranks && status == FLASHCPU_OK; r++)
    for (int f = 0; f < RING_FIELDS && status == FLASHCPU_OK; f++)
      if (all[r].signature[f] != all[0].signature[f])
        status = fcm_fail(f <= RING_V_DTYPE ? FLASHCPU_ERROR_SHAPE_MISMATCH
                                            : FLASHCPU_ERROR_INVALID_ARGUMENT,
                          CALL ": the ranks disagree on %s: rank 0 has %lld, "
                               "rank %d has %lld",
                          ring_field_names[f], (long long)all[0].signature[f],
                          r, (long long)all[r].signature[f]);
  free(all);
  return status;
}

/* A state's out and lse views in a buffer of the ring. */
static flashcpu_tensor state_out(const ring *g, float *state) {
  const fcm_call *c = &g->call;
  return flashcpu_tensor_bshd(state, FLASHCPU_DTYPE_F32, c->batch, g->block,
                              c->q_heads, c->v_head_dim);
}
static float *state_lse(const ring *g, float *state) {
  const fcm_call *c = &g->call;
  return state + c->batch * g->block * c->q_heads * c->v_head_dim;
}

/* Query block `mine` (0: the rank's first, 1: its second) against key block
 * `which` of the held buffer, which is block `key_block` of the prompt,
 * merged into the query block's running state. */
static flashcpu_status attend_pair(ring *g, int mine, int query_block,
                                   int which, int key_block) {
  const fcm_call *c = &g->call;
  const int64_t bs = g->block, hkv = c->kv_heads;
  flashcpu_tensor q = *c->q;
  q.data = (char *)q.data +
           mine * bs * q.strides[1] * (int64_t)flashcpu_dtype_size(q.dtype);
  q.dims[1] = bs;
  const size_t rows = (size_t)(c->batch * 2 * bs);
  flashcpu_tensor k =
      flashcpu_tensor_bshd(g->held + (size_t)(which * bs) * g->k_row,
                           c->k->dtype, c->batch, bs, hkv, c->head_dim);
  flashcpu_tensor v = flashcpu_tensor_bshd(
      g->held + rows * g->k_row + (size_t)(which * bs) * g->v_row, c->v->dtype,
      c->batch, bs, hkv, c->v_head_dim);
  k.strides[0] = 2 * bs * hkv * c->head_dim;
  v.strides[0] = 2 * bs * hkv * c->v_head_dim;
  int64_t *offsets = malloc((size_t)c->batch * sizeof *offsets);
  if (!offsets)
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  for (int64_t b = 0; b < c->batch; b++)
    offsets[b] = (int64_t)(query_block - key_block) * bs;
  flashcpu_attention_params params = c->params;
  params.query_offsets = offsets;
  params.sinks = NULL; /* the running state starts as the sink's */
  const flashcpu_tensor pair_out = state_out(g, g->pair);
  flashcpu_status status = flashcpu_attention(c->ctx, &q, &k, &v, &pair_out,
                                              state_lse(g, g->pair), &params);
  free(offsets);
  if (status != FLASHCPU_OK)
    return fcm_fail(status, CALL ": query block %d, key block %d: %s",
                    query_block, key_block, flashcpu_last_error(c->ctx));
  float *swap;
  if (!g->has_state[mine]) {
    swap = g->running[mine], g->running[mine] = g->pair, g->pair = swap;
    g->has_state[mine] = true;
    return FLASHCPU_OK;
  }
  const flashcpu_tensor states[2] = {state_out(g, g->running[mine]),
                                     state_out(g, g->pair)};
  const float *lses[2] = {state_lse(g, g->running[mine]),
                          state_lse(g, g->pair)};
  const flashcpu_tensor merged = state_out(g, g->spare);
  status = flashcpu_merge_states(c->ctx, 2, states, lses, &merged,
                                 state_lse(g, g->spare));
  if (status != FLASHCPU_OK)
    return fcm_fail(status, CALL ": merging: %s", flashcpu_last_error(c->ctx));
  swap = g->running[mine], g->running[mine] = g->spare, g->spare = swap;
  return FLASHCPU_OK;
}

/* The N steps; K/V blocks travel while the pairs compute. A rank whose
 * computation failed keeps passing blocks, so that no rank waits. */
static flashcpu_status run_ring(ring *g) {
  fcm_call *c = &g->call;
  const int n = c->ranks, r = c->rank;
  const int mine[2] = {r, 2 * n - 1 - r};
  const bool causal = (c->params.flags & FLASHCPU_FLAG_CAUSAL) != 0;
  flashcpu_status status = FLASHCPU_OK;
  if (c->params.sinks) {
    const int64_t state_out_floats =
        c->batch * g->block * c->q_heads * c->v_head_dim;
    for (int m = 0; m < 2; m++) {
      memset(g->running[m], 0, (size_t)state_out_floats * sizeof(float));
      for (int64_t b = 0; b < c->batch; b++)
        fcm_sink_lse(c,
                     state_lse(g, g->running[m]) + b * c->q_heads * g->block);
      g->has_state[m] = true;
    }
  }
  MPI_Datatype row;
  MPI_Type_contiguous((int)(g->k_row + g->v_row), MPI_BYTE, &row);
  MPI_Type_commit(&row);
  const int rows = (int)(c->batch * 2 * g->block);
  for (int step = 0; step < n; step++) {
    const int from = (r - step + n) % n;
    const int held[2] = {from, 2 * n - 1 - from};
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (step < n - 1) {
      MPI_Irecv(g->arriving, rows, row, (r - 1 + n) % n, RING_TAG, c->comm,
                &requests[0]);
      MPI_Isend(g->held, rows, row, (r + 1) % n, RING_TAG, c->comm,
                &requests[1]);
    }
    for (int m = 0; m < 2; m++)
      for (int w = 0; w < 2; w++) {
        if (status != FLASHCPU_OK || (causal && held[w] > mine[m])) continue;
        status = attend_pair(g, m, mine[m], w, held[w]);
        int done;
        MPI_Testall(2, requests, &done, MPI_STATUSES_IGNORE);
      }
    MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    unsigned char *swap = g->held;
    g->held = g->arriving, g->arriving = swap;
  }
  MPI_Type_free(&row);
  return status;
}

/* The running states into out and lse (rows of block m at m * Bs). */
static flashcpu_status finish(ring *g) {
  fcm_call *c = &g->call;
  for (int m = 0; m < 2; m++) {
    flashcpu_tensor out = *c->out;
    out.data = (char *)out.data + m * g->block * out.strides[1] *
                                      (int64_t)flashcpu_dtype_size(out.dtype);
    out.dims[1] = g->block;
    const flashcpu_tensor state = state_out(g, g->running[m]);
    const float *lse = state_lse(g, g->running[m]);
    const flashcpu_status status =
        flashcpu_merge_states(c->ctx, 1, &state, &lse, &out, NULL);
    if (status != FLASHCPU_OK)
      return fcm_fail(status, CALL ": %s", flashcpu_last_error(c->ctx));
    for (int64_t bh = 0; c->lse && bh < c->batch * c->q_heads; bh++)
      memcpy(c->lse + bh * 2 * g->block + m * g->block, lse + bh * g->block,
             (size_t)g->block * sizeof(float));
  }
  return FLASHCPU_OK;
}

flashcpu_status
flashcpu_mpi_ring_attention(flashcpu_context *ctx, MPI_Comm comm,
                            const flashcpu_tensor *q, const flashcpu_tensor *k,
                            const flashcpu_tensor *v,
                            const flashcpu_tensor *out, float *lse,
                            const flashcpu_attention_params *params) {
  fcm_clear_error();
  int initialized = 0, inter = 0;
  MPI_Initialized(&initialized);
  if (!initialized || comm == MPI_COMM_NULL)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": MPI is not initialized, or comm is MPI_COMM_NULL");
  MPI_Comm_test_inter(comm, &inter);
  if (inter)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": comm is an inter-communicator");
  ring g;
  memset(&g, 0, sizeof g);
  g.call.ctx = ctx;
  g.call.comm = comm;
  MPI_Comm_rank(comm, &g.call.rank);
  MPI_Comm_size(comm, &g.call.ranks);
  g.call.q = q;
  g.call.k = k;
  g.call.v = v;
  g.call.out = out;
  g.call.lse = lse;
  flashcpu_status status = check_local(&g, params);
  g.call.rows = g.block; /* the sink rows of one state */
  if (status == FLASHCPU_OK) status = allocate(&g);
  status = agree(&g, status);
  if (status == FLASHCPU_OK) {
    status = fcm_agree(&g.call, run_ring(&g));
    if (status == FLASHCPU_OK) status = fcm_agree(&g.call, finish(&g));
  }
  if (status == FLASHCPU_OK) fcm_clear_error();
  return status;
}

flashcpu_status flashcpu_mpi_ring_attention_f(
    flashcpu_context *ctx, MPI_Fint comm, const flashcpu_tensor *q,
    const flashcpu_tensor *k, const flashcpu_tensor *v,
    const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": MPI is not initialized");
  return flashcpu_mpi_ring_attention(ctx, MPI_Comm_f2c(comm), q, k, v, out, lse,
                                     params);
}
