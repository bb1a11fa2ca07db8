/* A model-shaped attention workload: buffers filled with random values,
 * parameters from the preset, and the bytes and FLOPs one call must move
 * and compute (the numerators of GB/s and GFLOP/s).
 *
 * Decode allocates several layer-sized KV caches and the caller rotates
 * through them, one per call, as a real decode step does; enough of them
 * that the last-level cache cannot hold them (docs/performance.md, "Don't
 * measure the cache").
 *
 * A workload is a list of requests, each a batch of its own with L_r query
 * rows packed one after the other (cu_seqlens_q) and S_r keys: decode,
 * verify and prefill have `batch` requests of q_rows rows; serve has
 * `batch` decode requests of one row and a prefill chunk. Its K/V are
 * contiguous ([B, S, Hkv, D] per layer, flashcpu_attention) or, with
 * page_size > 0, a page pool per layer (flashcpu_attention_paged through a
 * plan made once per context and workload). */
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
  TOOLKIT_PHASE_VERIFY = 2,  /* speculative verify: L draft rows under a
                                tree mask over the newest L keys */
  TOOLKIT_PHASE_SERVE = 3    /* an engine's ragged step: `batch` decode
                                requests of one row, kv lengths spread
                                evenly from 1K to kv_rows, plus one prefill
                                chunk of q_rows rows onto prefix_rows
                                cached keys (S = prefix_rows + q_rows) */
} toolkit_phase;

/* "decode" / "prefill" / "verify" / "serve". */
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
  /* > 0: the batch's kv lengths spread evenly from this (batch 0) to
   * kv_rows (decode and verify, whatever mixed_kv_lengths says; serve: its
   * decode requests, instead of TOOLKIT_SERVE_SHORTEST_KV). 0: as above. */
  int64_t shortest_kv;
  int layers;    /* KV caches to rotate over; 0: decide (decode: enough to
                    exceed the last-level cache, prefill: 1) */
  uint64_t seed; /* of the random values */
  /* 0: contiguous K/V per layer. > 0: each layer's K and V in a pool of
   * pages of page_size tokens, NHD [num_pages, page_size, Hkv, D], every
   * request's pages in a random order listed by a block table; the same
   * values as the contiguous workload, the same accounting. */
  int64_t page_size;
  int64_t prefix_rows; /* serve: keys cached before the prefill chunk */
} toolkit_workload_spec;

/* Serve's defaults (toolkit_workload_spec_make): the chunk's cached prefix,
 * the page size, and the shortest decode request's kv length. */
enum {
  TOOLKIT_SERVE_PREFIX_ROWS = 4096,
  TOOLKIT_SERVE_PAGE_SIZE = 16,
  TOOLKIT_SERVE_SHORTEST_KV = 1024
};

/* A spec with the preset's masks and softcap, batch 1, one dtype for all
 * tensors, a tree mask for verify, and the layer count left to the
 * builder. Decode, verify and serve rotate KV caches; prefill uses one.
 * Contiguous K/V, except serve: pages of TOOLKIT_SERVE_PAGE_SIZE. */
toolkit_workload_spec toolkit_workload_spec_make(const toolkit_preset *preset,
                                                 toolkit_phase phase,
                                                 int64_t q_rows,
                                                 int64_t kv_rows,
                                                 flashcpu_dtype dtype);

typedef struct toolkit_workload {
  toolkit_workload_spec spec;
  int layer_count;
  /* Requests R and packed query rows T (decode, verify, prefill: R = B and
   * T = B * L; serve: R = B + 1, the chunk last, T = B + L). */
  int64_t num_requests, num_tokens;
  int32_t *cu_seqlens_q; /* [R + 1] */
  int32_t *seq_lens_kv;  /* [R]: S_r */
  void *q;               /* [B, L, Hq, D] BSHD, which is packed [1, T, Hq, D] */
  void *out;             /* [B, L, Hq, D], likewise */
  /* layer_count buffers: [B, S, Hkv, D]; with page_size > 0 the pools
   * [num_pages, page_size, Hkv, D]. Serve on contiguous K/V: the decode
   * requests' [B, S, Hkv, D], and the chunk's in chunk_k_layers. */
  void **k_layers;
  void **v_layers;
  void **chunk_k_layers; /* serve, contiguous: [1, prefix + L, Hkv, D] */
  /* Quantized K/V (kv_dtype I8, U8, F8_*; Q8_0 has its own): per layer,
   * per-token scales [B, S, Hkv] (paged: [pages, page_size, Hkv]) for I8
   * and U8 (U8 with zero points), one per-tensor scale for F8; the views
   * the calls take. NULL / zero otherwise. */
  float **scale_layers; /* [layer]: K's scales, V's, K's zeros, V's zeros */
  flashcpu_kv_scales *k_scales, *v_scales; /* [layer] */
  size_t scale_floats;                     /* per array */
  void **chunk_v_layers;
  /* kv_bytes: one K (or V) buffer of k_layers; chunk_kv_bytes: of
   * chunk_k_layers. */
  size_t q_bytes, out_bytes, kv_bytes, chunk_kv_bytes;
  /* Paged: pages per pool, and the block table [R][block_table_stride]. */
  int64_t num_pages;
  int32_t *block_table;
  int64_t block_table_stride;
  /* K and V rows within the kv lengths, per layer: what is filled (and so
   * resident); rows past a batch's length are never touched. */
  size_t layer_bytes;
  /* params.kv_lengths (serve: the decode requests'); NULL without mixed
   * lengths */
  int64_t *kv_lengths;
  /* The memory cap (a quarter of RAM) left the rotated KV caches under
   * CACHE_MULTIPLE (4) x the last-level cache: some reads may hit it. */
  bool rotation_under_cache;
  /* What the workload's calls take. Paged: no kv_lengths and no tree mask
   * (the plan has them). Serve on contiguous K/V: params for the decode
   * requests' call, chunk_params (no kv_lengths) for the chunk's. */
  flashcpu_attention_params params;
  flashcpu_attention_params chunk_params;
  /* params.tree_mask, or paged: flashcpu_batch.tree_mask over the packed
   * rows; NULL without one. */
  flashcpu_tree_mask *tree;
  /* The draft tree per packed row, [T][tree_row_stride] (contiguous: every
   * batch's rows in turn). */
  uint64_t *tree_bits;
  int64_t tree_row_stride;
  int32_t *tree_num_keys; /* [R]: q_rows each (paged verify) */
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

/* Bytes of one token's K (or V) row over every kv head, quantized or not. */
size_t toolkit_kv_row_bytes(const toolkit_workload_spec *spec);

/* Frees the buffers; accepts an empty (zeroed or failed) workload. */
void toolkit_workload_free(toolkit_workload *workload);

/* Views of layer `layer` (taken modulo layer_count) of a contiguous
 * workload; for serve, of its decode requests' call. */
void toolkit_workload_tensors(const toolkit_workload *workload, int layer,
                              flashcpu_tensor *q, flashcpu_tensor *k,
                              flashcpu_tensor *v, flashcpu_tensor *out);

/* Serve on contiguous K/V: views of the chunk's call ([1, L] rows onto
 * [1, prefix + L] keys), with chunk_params. */
void toolkit_workload_chunk_tensors(const toolkit_workload *workload, int layer,
                                    flashcpu_tensor *q, flashcpu_tensor *k,
                                    flashcpu_tensor *v, flashcpu_tensor *out);

/* A paged workload's layer `layer`: packed q and out [1, T, Hq, D], the
 * layer's pages, and (batch may be NULL) the step's lengths, block table
 * and tree masks, the same for every layer: flashcpu_plan_create takes it
 * once, flashcpu_attention_paged each layer with workload->params. */
void toolkit_workload_paged(const toolkit_workload *workload, int layer,
                            flashcpu_tensor *q, flashcpu_paged_kv *kv,
                            flashcpu_tensor *out, flashcpu_batch *batch);

/* The plan of a paged workload on ctx (*plan NULL for a contiguous one):
 * one per (context, workload), freed with flashcpu_plan_destroy. */
flashcpu_status toolkit_workload_plan(flashcpu_context *ctx,
                                      const toolkit_workload *workload,
                                      flashcpu_plan **plan);

/* One timed call on layer `layer`: flashcpu_attention_paged with the plan,
 * or flashcpu_attention (serve on contiguous K/V: the decode requests'
 * call, then the chunk's). */
flashcpu_status toolkit_workload_call(flashcpu_context *ctx,
                                      const toolkit_workload *workload,
                                      const flashcpu_plan *plan, int layer);

/* Request r as a batch of its own (batch 1, q_rows L_r, kv_rows S_r, its
 * masks), for visible-key counts and checks. */
toolkit_workload_spec
toolkit_workload_request_spec(const toolkit_workload *workload,
                              int64_t request);

/* Request r of layer `layer` on contiguous views of one batch, for the
 * oracle: q and out [1, L_r, Hq, D] (rows of the workload's q and out),
 * k and v [1, S_r, Hkv, D] (paged: copied out of the pages into
 * `gathered`), and params with the request's tree mask in `tree`. The view
 * points into itself: do not copy it. */
typedef struct toolkit_request_view {
  flashcpu_tensor q, k, v, out;
  flashcpu_attention_params params;
  flashcpu_tree_mask tree;
  flashcpu_kv_scales k_scales, v_scales; /* params' where quantized */
  void *gathered;
} toolkit_request_view;
/* Returns 0, or -1 when the copy cannot be allocated. */
int toolkit_workload_request_view(const toolkit_workload *workload, int layer,
                                  int64_t request, toolkit_request_view *view);
void toolkit_request_view_free(toolkit_request_view *view);

/* Rows of K/V batch b uses: its kv length, or kv_rows (serve: decode
 * request b's). */
int64_t toolkit_workload_kv_length(const toolkit_workload *workload, int64_t b);

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

/* Which measured ceiling bounds a workload: decode and serve the read
 * bandwidth, prefill the FMA peak, verify whichever floor (bytes /
 * bandwidth or FLOPs / FMA peak) is longer. */
typedef enum toolkit_bound {
  TOOLKIT_BOUND_READ = 0,
  TOOLKIT_BOUND_FMA = 1
} toolkit_bound;
struct toolkit_ceilings;
toolkit_bound toolkit_workload_bound(const toolkit_workload *workload,
                                     const struct toolkit_ceilings *ceilings);
/* Percent of the binding ceiling reached at `seconds` per call; for an
 * arithmetic bound, the peak of the unit the kernels that ran use
 * (kernels: flashcpu_context_last_kernels(), NULL: fp32 FMA). */
double toolkit_ceiling_percent(const toolkit_workload *workload,
                               const struct toolkit_ceilings *ceilings,
                               double seconds, const char *kernels);

#ifdef __cplusplus
}
#endif

#endif
