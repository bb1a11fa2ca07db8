/* A model-shaped attention workload: buffers filled with random values,
 * parameters from the preset, and the bytes and FLOPs one call must move
 * and compute (the numerators of GB/s and GFLOP/s).
 *
 * Decode allocates several layer-sized KV caches and the caller rotates
 * through them, one per call, as a real decode step does; enough of them
 * that the last-level cache cannot hold them (docs/performance.md, "Don't measure the
 * cache"). */
#ifndef FLASHCPU_TOOLS_WORKLOAD_H
#define FLASHCPU_TOOLS_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/presets.h"
#include "flashcpu/flashcpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum toolkit_phase {
  TOOLKIT_PHASE_DECODE = 0,  /* one new row per sequence (or a few) */
  TOOLKIT_PHASE_PREFILL = 1, /* many rows; L = S, or chunked L < S */
  TOOLKIT_PHASE_VERIFY = 2   /* speculative verify: L draft rows under a
                                tree mask over the newest L keys */
} toolkit_phase;

/* "decode" / "prefill" / "verify". */
const char *toolkit_phase_name(toolkit_phase phase);

typedef struct toolkit_workload_spec {
  const toolkit_preset *preset;
  toolkit_phase phase;
  int64_t batch;
  int64_t q_rows;  /* L */
  int64_t kv_rows; /* S */
  flashcpu_dtype q_dtype, kv_dtype, out_dtype;
  bool causal;
  int64_t window_left, window_right; /* -1: unbounded */
  float softcap;                     /* 0: off */
  bool tree_mask; /* draft tree over the newest q_rows keys (verify) */
  /* Per-batch kv lengths (params.kv_lengths) spread evenly from kv_rows / 8
   * (batch 0) to kv_rows (the last batch), as a decode batch mixes short and
   * long sequences; false: every batch uses kv_rows. */
  bool mixed_kv_lengths;
  int layers;    /* KV caches to rotate over; 0: decide (decode: enough to
                    exceed the last-level cache, prefill: 1) */
  uint64_t seed; /* of the random values */
} toolkit_workload_spec;

/* A spec with the preset's masks and softcap, batch 1, one dtype for all
 * tensors, a tree mask for verify, and the layer count left to the
 * builder. Decode and verify rotate KV caches; prefill uses one. */
toolkit_workload_spec toolkit_workload_spec_make(const toolkit_preset *preset,
                                                 toolkit_phase phase,
                                                 int64_t q_rows,
                                                 int64_t kv_rows,
                                                 flashcpu_dtype dtype);

typedef struct toolkit_workload {
  toolkit_workload_spec spec;
  int layer_count;
  void *q;        /* [B, L, Hq, D] BSHD */
  void *out;      /* [B, L, Hq, D] */
  void **k_layers; /* layer_count buffers [B, S, Hkv, D] */
  void **v_layers;
  size_t q_bytes, out_bytes, kv_bytes; /* kv_bytes: one K (or V) buffer */
  /* K and V rows within the kv lengths, per layer: what is filled (and so
   * resident); rows past a batch's length are never touched. */
  size_t layer_bytes;
  int64_t *kv_lengths; /* params.kv_lengths; NULL without mixed lengths */
  /* The memory cap (a quarter of RAM) left the rotated KV caches under
   * CACHE_MULTIPLE (4) x the last-level cache: some reads may hit it. */
  bool rotation_under_cache;
  flashcpu_attention_params params;
  flashcpu_tree_mask *tree; /* params.tree_mask; NULL without one */
  uint64_t *tree_bits;
  /* Per call: K and V rows some query row can see (read once; per batch,
   * within its kv length), plus Q and the output written. */
  double bytes_per_call;
  /* Per call: 4 * Hq * D * visible (query, key) pairs * B. */
  double flops_per_call;
  int64_t visible_pairs; /* per head, averaged over the batch */
} toolkit_workload;

/* Allocates and fills a workload. Returns 0, or -1 with a message in
 * error (out of memory, bad shape); *workload is then empty. */
int toolkit_workload_build(const toolkit_workload_spec *spec,
                           toolkit_workload *workload, char *error,
                           size_t error_size);

/* Frees the buffers; accepts an empty (zeroed or failed) workload. */
void toolkit_workload_free(toolkit_workload *workload);

/* Views of layer `layer` (taken modulo layer_count). */
void toolkit_workload_tensors(const toolkit_workload *workload, int layer,
                              flashcpu_tensor *q, flashcpu_tensor *k,
                              flashcpu_tensor *v, flashcpu_tensor *out);

/* Rows of K/V batch b uses: its kv length, or kv_rows. */
int64_t toolkit_workload_kv_length(const toolkit_workload *workload,
                                   int64_t b);

/* The 4x of "4x the last-level cache" that decode rotation aims for. */
enum { TOOLKIT_CACHE_MULTIPLE = 4 };

/* Keys [*begin, *end) that query row `row` sees under the spec's causal
 * flag and window (the header's bottom-right alignment); empty when
 * *begin >= *end. A tree mask may hide some of the newest of them. */
void toolkit_visible_keys(const toolkit_workload_spec *spec, int64_t row,
                          int64_t *begin, int64_t *end);

/* The draft tree of verify: row i is draft token i, its parent is
 * (i - 1) / 2 (a binary tree, as a speculative decoder's top-k drafts
 * branch); a row sees its ancestors and itself among the newest keys. */
bool toolkit_tree_allows(int64_t row, int64_t draft_key);

/* Which measured ceiling bounds a workload: decode the read bandwidth,
 * prefill the FMA peak, verify whichever floor (bytes / bandwidth or
 * FLOPs / FMA peak) is longer. */
typedef enum toolkit_bound {
  TOOLKIT_BOUND_READ = 0,
  TOOLKIT_BOUND_FMA = 1
} toolkit_bound;
struct toolkit_ceilings;
toolkit_bound toolkit_workload_bound(const toolkit_workload *workload,
                                     const struct toolkit_ceilings *ceilings);
/* Percent of the binding ceiling reached at `seconds` per call. */
double toolkit_ceiling_percent(const toolkit_workload *workload,
                               const struct toolkit_ceilings *ceilings,
                               double seconds);

#ifdef __cplusplus
}
#endif

#endif
