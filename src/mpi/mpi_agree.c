/* What every rank checks before any rank computes: its own arguments, then
 * (through one exchange) that all ranks were given the same problem, then
 * (through a second) that their key ranges cover whole chunks. Every rank
 * reaches the same verdict from the same exchanged data, so all return
 * the same status and none waits on a collective the others skipped. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

#define CALL "flashcpu_mpi_attention"

/* What the ranks must agree on, in the order a disagreement is reported. */
enum signature_field {
  SIG_BATCH,
  SIG_ROWS,
  SIG_Q_HEADS,
  SIG_HEAD_DIM,
  SIG_KV_HEADS,
  SIG_V_HEAD_DIM,
  SIG_Q_DTYPE,
  SIG_K_DTYPE,
  SIG_V_DTYPE,
  SIG_CHUNK_KEYS,
  SIG_ROOT,
  SIG_SCALE,
  SIG_FLAGS,
  SIG_WINDOW_LEFT,
  SIG_WINDOW_RIGHT,
  SIG_SOFTCAP,
  SIG_TREE,
  SIG_TREE_KEYS,
  SIG_SINKS,
  SIG_SINKS_DTYPE,
  SIG_ALIBI,
  SIG_ALIBI_PER_BATCH,
  SIG_ADDITIVE,
  SIG_Q_HASH,
  SIG_SINKS_HASH,
  SIG_ALIBI_HASH,
  SIG_TREE_HASH,
  SIG_FIELDS
};

static const char *const field_names[SIG_FIELDS] = {
    "q's batch (requests)",
    "q's seq (query rows)",
    "q's heads",
    "head_dim",
    "k and v heads",
    "v's head_dim",
    "q's dtype",
    "k's dtype",
    "v's dtype",
    "options->chunk_keys",
    "options->root",
    "params->scale (bits)",
    "params->flags",
    "params->window_left",
    "params->window_right",
    "params->softcap (bits)",
    "whether a tree mask is given",
    "tree_mask->num_keys",
    "whether sinks are given",
    "params->sinks_dtype",
    "whether ALiBi slopes are given",
    "whether ALiBi slopes are per request",
    "whether an additive mask is given",
    "q's values (hash)",
    "the sinks' values (hash)",
    "the ALiBi slopes' values (hash)",
    "the tree mask's bits (hash)",
};

/* One rank's contribution to the first exchange. */
typedef struct rank_header {
  fcm_verdict verdict;
  int64_t signature[SIG_FIELDS];
} rank_header;

/* The header of this thread's call in progress (thread-local: calls on
 * different threads with different communicators do not mix). */
static _Thread_local rank_header header;

uint64_t fcm_hash(uint64_t hash, const void *data, size_t size) {
  const unsigned char *bytes = data;
  for (size_t i = 0; i < size; i++) {
    hash ^= bytes[i];
    hash *= UINT64_C(0x100000001b3);
  }
  return hash;
}

static int64_t float_bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (int64_t)bits;
}

static bool float_dtype(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32 || dtype == FLASHCPU_DTYPE_F16 ||
         dtype == FLASHCPU_DTYPE_BF16;
}

/* Bytes from a view's data to one past its last element (Q8_0: whole
 * blocks); 0 for a view without elements. */
static uint64_t extent_bytes(const flashcpu_tensor *t) {
  uint64_t last = 0;
  for (int d = 0; d < 4; d++) {
    if (t->dims[d] == 0) return 0;
    last += (uint64_t)(t->dims[d] - 1) * (uint64_t)t->strides[d];
  }
  const uint64_t block = (uint64_t)flashcpu_dtype_block(t->dtype);
  return (last / block + 1) * (uint64_t)flashcpu_dtype_size(t->dtype);
}

static bool spans_overlap(const void *a, uint64_t a_size, const void *b,
                          uint64_t b_size) {
  const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
  return a_size && b_size && a0 < b0 + b_size && b0 < a0 + a_size;
}

static flashcpu_status check_view(const flashcpu_tensor *t, const char *name,
                                  int64_t min_seq, bool float_only) {
  if (!t)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER, CALL ": %s is NULL", name);
  if (float_only ? !float_dtype(t->dtype) : !flashcpu_dtype_size(t->dtype))
    return fcm_fail(FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                    CALL ": %s's dtype %d is not one %s takes", name,
                    (int)t->dtype,
                    float_only ? "f32, f16 or bf16" : "flashcpu");
  for (int d = 0; d < 4; d++) {
    if (t->dims[d] < (d == 1 ? min_seq : 1))
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": %s->dims[%d] is %lld; it must be >= %lld", name,
                      d, (long long)t->dims[d],
                      (long long)(d == 1 ? min_seq : 1));
    if (t->strides[d] < 0)
      return fcm_fail(FLASHCPU_ERROR_BAD_LAYOUT,
                      CALL ": %s->strides[%d] is negative", name, d);
  }
  if (t->strides[3] != 1)
    return fcm_fail(FLASHCPU_ERROR_BAD_LAYOUT,
                    CALL ": %s's head_dim must be contiguous (strides[3] 1)",
                    name);
  if (!t->data && extent_bytes(t))
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER, CALL ": %s->data is NULL",
                    name);
  return FLASHCPU_OK;
}

static flashcpu_status copy_params(fcm_call *call,
                                   const flashcpu_attention_params *params) {
  flashcpu_attention_params_init(&call->params);
  if (!params) return FLASHCPU_OK;
  const size_t v010 = offsetof(flashcpu_attention_params, sinks);
  if (params->struct_size != sizeof *params && params->struct_size != v010)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": params->struct_size is %zu, expected %zu "
                         "(flashcpu_attention_params_init sets it)",
                    params->struct_size, sizeof *params);
  memcpy(&call->params, params, params->struct_size);
  call->params.struct_size = sizeof call->params;
  if (call->params.query_offsets)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": params->query_offsets must be NULL (the call "
                         "places the queries itself)");
  return FLASHCPU_OK;
}

/* k and v, contiguous: their shapes against q's, and the lengths. */
static flashcpu_status check_kv(fcm_call *call) {
  flashcpu_status status;
  if ((status = check_view(call->k, "k", 0, false)) ||
      (status = check_view(call->v, "v", 0, false)))
    return status;
  const flashcpu_tensor *q = call->q, *k = call->k, *v = call->v;
  call->kv_heads = k->dims[2];
  call->v_head_dim = v->dims[3];
  call->k_dtype = k->dtype;
  call->v_dtype = v->dtype;
  if (k->dims[0] != q->dims[0] || v->dims[0] != q->dims[0] ||
      k->dims[3] != q->dims[3] || v->dims[1] != k->dims[1] ||
      v->dims[2] != k->dims[2] || q->dims[2] % k->dims[2] != 0)
    return fcm_fail(
        FLASHCPU_ERROR_SHAPE_MISMATCH,
        CALL ": q [%lld, %lld, %lld, %lld], k [%lld, %lld, %lld, "
             "%lld] and v [%lld, %lld, %lld, %lld] do not fit "
             "together (batch, kv rows, kv heads, head_dim, GQA)",
        (long long)q->dims[0], (long long)q->dims[1], (long long)q->dims[2],
        (long long)q->dims[3], (long long)k->dims[0], (long long)k->dims[1],
        (long long)k->dims[2], (long long)k->dims[3], (long long)v->dims[0],
        (long long)v->dims[1], (long long)v->dims[2], (long long)v->dims[3]);
  const int64_t *lengths = call->params.kv_lengths;
  for (int64_t b = 0; lengths && b < call->batch; b++)
    if (lengths[b] < 0 || lengths[b] > k->dims[1])
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": kv_lengths[%lld] is %lld; it must be in [0, "
                           "%lld] (this rank's rows)",
                      (long long)b, (long long)lengths[b],
                      (long long)k->dims[1]);
  return FLASHCPU_OK;
}

static flashcpu_status check_shapes(fcm_call *call) {
  flashcpu_status status;
  if ((status = check_view(call->q, "q", 1, true))) return status;
  const flashcpu_tensor *q = call->q;
  call->batch = q->dims[0];
  call->rows = q->dims[1];
  call->q_heads = q->dims[2];
  call->head_dim = q->dims[3];
  if ((status = call->paged ? fcm_check_paged(call) : check_kv(call)))
    return status;
  if (!call->receives) return FLASHCPU_OK;
  if ((status = check_view(call->out, "out", 1, true))) return status;
  const int64_t expected[4] = {call->batch, call->rows, call->q_heads,
                               call->v_head_dim};
  for (int d = 0; d < 4; d++)
    if (call->out->dims[d] != expected[d])
      return fcm_fail(FLASHCPU_ERROR_SHAPE_MISMATCH,
                      CALL ": out->dims[%d] is %lld; it must be %lld", d,
                      (long long)call->out->dims[d], (long long)expected[d]);
  const uint64_t out_bytes = extent_bytes(call->out);
  const uint64_t lse_bytes =
      (uint64_t)(call->batch * call->q_heads * call->rows) * sizeof(float);
  const void *inputs[3] = {q->data, NULL, NULL};
  uint64_t sizes[3] = {extent_bytes(q), 0, 0};
  if (call->paged) {
    inputs[1] = call->paged->k;
    inputs[2] = call->paged->v;
    fcm_paged_extents(call, &sizes[1], &sizes[2]);
  } else {
    inputs[1] = call->k->data;
    inputs[2] = call->v->data;
    sizes[1] = extent_bytes(call->k);
    sizes[2] = extent_bytes(call->v);
  }
  static const char *const names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++)
    if (spans_overlap(call->out->data, out_bytes, inputs[i], sizes[i]) ||
        (call->lse && spans_overlap(call->lse, lse_bytes, inputs[i], sizes[i])))
      return fcm_fail(FLASHCPU_ERROR_OVERLAP,
                      CALL ": out or lse overlaps %s in memory", names[i]);
  if (call->lse &&
      spans_overlap(call->lse, lse_bytes, call->out->data, out_bytes))
    return fcm_fail(FLASHCPU_ERROR_OVERLAP,
                    CALL ": lse overlaps out in memory");
  return FLASHCPU_OK;
}

static flashcpu_status check_masks(const fcm_call *call) {
  const flashcpu_attention_params *p = &call->params;
  if (p->tree_mask) {
    const flashcpu_tree_mask *tree = p->tree_mask;
    if (!tree->bits)
      return fcm_fail(FLASHCPU_ERROR_NULL_POINTER,
                      CALL ": params->tree_mask->bits is NULL");
    if (tree->num_rows < call->rows || tree->num_keys < 1 ||
        tree->row_stride < (tree->num_keys + 63) / 64 || tree->batch_stride < 0)
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": the tree mask (num_rows %lld, num_keys %lld, "
                           "row_stride %lld, batch_stride %lld) does not "
                           "cover %lld query rows",
                      (long long)tree->num_rows, (long long)tree->num_keys,
                      (long long)tree->row_stride,
                      (long long)tree->batch_stride, (long long)call->rows);
  }
  if (p->sinks && !float_dtype(p->sinks_dtype))
    return fcm_fail(FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
                    CALL ": params->sinks_dtype must be f32, f16 or bf16");
  if (p->alibi_slopes && p->alibi_batch_stride != 0 &&
      p->alibi_batch_stride < call->q_heads)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": params->alibi_batch_stride must be 0 or >= Hq");
  if (p->additive_mask) {
    if (!p->additive_mask->data)
      return fcm_fail(FLASHCPU_ERROR_NULL_POINTER,
                      CALL ": params->additive_mask->data is NULL");
    for (int d = 0; d < 4; d++)
      if (p->additive_mask->strides[d] < 0)
        return fcm_fail(FLASHCPU_ERROR_BAD_LAYOUT,
                        CALL ": additive_mask->strides[%d] is negative", d);
  }
  return FLASHCPU_OK;
}

/* The signature: the shapes and options, and hashes of the inputs every
 * rank must hold identically (small next to the K/V a rank reads). */
static void sign(const fcm_call *call, int64_t *signature) {
  const flashcpu_attention_params *p = &call->params;
  const flashcpu_tensor *q = call->q;
  signature[SIG_BATCH] = call->batch;
  signature[SIG_ROWS] = call->rows;
  signature[SIG_Q_HEADS] = call->q_heads;
  signature[SIG_HEAD_DIM] = call->head_dim;
  signature[SIG_KV_HEADS] = call->kv_heads;
  signature[SIG_V_HEAD_DIM] = call->v_head_dim;
  signature[SIG_Q_DTYPE] = q->dtype;
  signature[SIG_K_DTYPE] = call->k_dtype;
  signature[SIG_V_DTYPE] = call->v_dtype;
  signature[SIG_CHUNK_KEYS] = call->chunk_keys;
  signature[SIG_ROOT] = call->root;
  signature[SIG_SCALE] = float_bits(p->scale);
  signature[SIG_FLAGS] = p->flags;
  signature[SIG_WINDOW_LEFT] = p->window_left;
  signature[SIG_WINDOW_RIGHT] = p->window_right;
  signature[SIG_SOFTCAP] = float_bits(p->softcap);
  signature[SIG_TREE] = p->tree_mask != NULL;
  signature[SIG_TREE_KEYS] = p->tree_mask ? p->tree_mask->num_keys : 0;
  signature[SIG_SINKS] = p->sinks != NULL;
  signature[SIG_SINKS_DTYPE] = p->sinks ? p->sinks_dtype : 0;
  signature[SIG_ALIBI] = p->alibi_slopes != NULL;
  signature[SIG_ALIBI_PER_BATCH] = p->alibi_slopes && p->alibi_batch_stride;
  signature[SIG_ADDITIVE] = p->additive_mask != NULL;

  uint64_t hash = FCM_HASH_SEED;
  const size_t q_size = flashcpu_dtype_size(q->dtype);
  for (int64_t b = 0; b < q->dims[0]; b++)
    for (int64_t s = 0; s < q->dims[1]; s++)
      for (int64_t h = 0; h < q->dims[2]; h++) {
        const int64_t at =
            b * q->strides[0] + s * q->strides[1] + h * q->strides[2];
        hash = fcm_hash(hash, (const char *)q->data + at * (int64_t)q_size,
                        (size_t)q->dims[3] * q_size);
      }
  signature[SIG_Q_HASH] = (int64_t)hash;
  hash = FCM_HASH_SEED;
  if (p->sinks)
    hash =
        fcm_hash(hash, p->sinks,
                 (size_t)call->q_heads * flashcpu_dtype_size(p->sinks_dtype));
  signature[SIG_SINKS_HASH] = (int64_t)hash;
  hash = FCM_HASH_SEED;
  const int64_t slope_rows = p->alibi_batch_stride ? call->batch : 1;
  for (int64_t b = 0; p->alibi_slopes && b < slope_rows; b++)
    hash = fcm_hash(hash, p->alibi_slopes + b * p->alibi_batch_stride,
                    (size_t)call->q_heads * sizeof(float));
  signature[SIG_ALIBI_HASH] = (int64_t)hash;
  hash = FCM_HASH_SEED;
  if (p->tree_mask) {
    const flashcpu_tree_mask *tree = p->tree_mask;
    const int64_t words = (tree->num_keys + 63) / 64;
    const int64_t tree_batches = tree->batch_stride ? call->batch : 1;
    for (int64_t b = 0; b < tree_batches; b++)
      for (int64_t i = 0; i < call->rows; i++)
        hash = fcm_hash(
            hash, tree->bits + b * tree->batch_stride + i * tree->row_stride,
            (size_t)words * sizeof(uint64_t));
  }
  signature[SIG_TREE_HASH] = (int64_t)hash;
}

flashcpu_status fcm_check_local(fcm_call *call,
                                const flashcpu_attention_params *params,
                                const flashcpu_mpi_options *options) {
  flashcpu_status status;
  memset(header.signature, 0, sizeof header.signature);
  flashcpu_mpi_options defaults;
  flashcpu_mpi_options_init(&defaults);
  if (!options) options = &defaults;
  if (options->struct_size != sizeof *options)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": options->struct_size is %zu, expected %zu "
                         "(flashcpu_mpi_options_init sets it)",
                    options->struct_size, sizeof *options);
  if (options->chunk_keys < 0)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": options->chunk_keys is %lld; it must be >= 0",
                    (long long)options->chunk_keys);
  call->chunk_keys = options->chunk_keys ? options->chunk_keys
                                         : FLASHCPU_MPI_DEFAULT_CHUNK_KEYS;
  call->root = options->root;
  if (call->root < -1 || call->root >= call->ranks)
    return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                    CALL ": options->root is %d; it must be -1 or a rank of "
                         "the communicator's %d",
                    call->root, call->ranks);
  call->receives = call->root < 0 || call->root == call->rank;
  if (!call->ctx)
    return fcm_fail(FLASHCPU_ERROR_NULL_POINTER, CALL ": ctx is NULL");
  if ((status = copy_params(call, params)) || (status = check_shapes(call)) ||
      (status = check_masks(call)))
    return status;
  sign(call, header.signature);
  return FLASHCPU_OK;
}

static int64_t first_difference(const int64_t *a, const int64_t *b) {
  for (int64_t f = 0; f < SIG_FIELDS; f++)
    if (a[f] != b[f]) return f;
  return -1;
}

flashcpu_status fcm_agree_on_call(fcm_call *call,
                                  flashcpu_status local_status) {
  void *gathered;
  flashcpu_status status = fcm_gather_verdicts(call, &header, sizeof header,
                                               local_status, &gathered);
  const rank_header *all = gathered;
  for (int r = 1; r < call->ranks && status == FLASHCPU_OK; r++) {
    const int64_t f = first_difference(all[0].signature, all[r].signature);
    if (f < 0) continue;
    status = fcm_fail(f <= SIG_V_DTYPE ? FLASHCPU_ERROR_SHAPE_MISMATCH
                                       : FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": the ranks disagree on %s: rank 0 has %lld, "
                           "rank %d has %lld",
                      field_names[f], (long long)all[0].signature[f], r,
                      (long long)all[r].signature[f]);
  }
  free(gathered);
  return status;
}
