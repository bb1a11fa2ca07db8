/* Workload buffers and their accounting. Values are drawn as bit patterns:
 * a random sign, a random binade in [1/16, 1) and random mantissa bits, so
 * every value is exactly representable in its dtype, never zero and below
 * 1 in magnitude, with no float conversion code. */
#include "common/workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ceilings.h"
#include "common/cpu_info.h"

enum { MIN_DECODE_LAYERS = 32 };
static const uint64_t DEFAULT_MEMORY_BUDGET = 4ull << 30;

const char *toolkit_phase_name(toolkit_phase phase) {
  switch (phase) {
  case TOOLKIT_PHASE_DECODE:
    return "decode";
  case TOOLKIT_PHASE_VERIFY:
    return "verify";
  case TOOLKIT_PHASE_SERVE:
    return "serve";
  default:
    return "prefill";
  }
}

toolkit_workload_spec toolkit_workload_spec_make(const toolkit_preset *preset,
                                                 toolkit_phase phase,
                                                 int64_t q_rows,
                                                 int64_t kv_rows,
                                                 flashcpu_dtype dtype) {
  toolkit_workload_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.preset = preset;
  spec.phase = phase;
  spec.batch = 1;
  spec.q_rows = q_rows;
  spec.kv_rows = kv_rows;
  spec.q_dtype = spec.kv_dtype = spec.out_dtype = dtype;
  spec.causal = preset->causal;
  spec.window_left = preset->window;
  spec.window_right = preset->window >= 0 ? 0 : -1;
  spec.softcap = preset->softcap;
  spec.tree_mask = phase == TOOLKIT_PHASE_VERIFY;
  spec.layers = 0;
  spec.seed = 0x5eed0f1a5c9ull;
  if (phase == TOOLKIT_PHASE_SERVE) {
    spec.page_size = TOOLKIT_SERVE_PAGE_SIZE;
    spec.prefix_rows = TOOLKIT_SERVE_PREFIX_ROWS;
  }
  return spec;
}

/* splitmix64 of a counter: stateless, so any thread can fill any chunk and
 * the values do not depend on the thread count. */
static uint64_t random_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* sign | exponent (one of the 4 binades below 1) | mantissa. */
static uint32_t random_pattern(uint64_t bits, int exponent_bits,
                               int mantissa_bits, int bias) {
  uint32_t mantissa = (uint32_t)(bits & ((1u << mantissa_bits) - 1));
  uint32_t exponent = (uint32_t)(bias - 1 - (int)((bits >> mantissa_bits) & 3));
  uint32_t sign = (uint32_t)((bits >> (mantissa_bits + 2)) & 1);
  return (sign << (exponent_bits + mantissa_bits)) |
         (exponent << mantissa_bits) | mantissa;
}

/* Elements [first, first + count) of the stream that a seed defines: element
 * i of f32 is draw i; f16 and bf16 take four values from one 64-bit draw
 * (element i is bits 16 * (i % 4) of draw i / 4). Any range of the stream
 * can be filled on its own, so a page holds the same values as the same
 * rows of a contiguous cache. */
static void fill_range(void *data, flashcpu_dtype dtype, int64_t first,
                       int64_t count, uint64_t seed) {
  if (flashcpu_dtype_size(dtype) == 1 || dtype == FLASHCPU_DTYPE_Q8_0) {
    /* Quantized: `first` and `count` in bytes of the stream. fp8 codes
     * keep below 2 (no NaN or inf); Q8_0 blocks get the scale 2^-7. */
    unsigned char *bytes = data;
    for (int64_t i = first; i < first + count; i++) {
      const unsigned byte =
          (unsigned)(random_bits(seed, (uint64_t)(i / 8)) >> (8 * (i % 8))) &
          0xffu;
      unsigned char code = (unsigned char)byte;
      if (dtype == FLASHCPU_DTYPE_F8_E4M3 || dtype == FLASHCPU_DTYPE_F8_E5M2)
        code = (unsigned char)(byte & 0xbfu);
      if (dtype == FLASHCPU_DTYPE_Q8_0 && i % 34 < 2)
        code = i % 34 == 0 ? 0x00 : 0x20;
      bytes[i - first] = code;
    }
    return;
  }
  if (dtype == FLASHCPU_DTYPE_F32) {
    uint32_t *words = data;
    for (int64_t i = 0; i < count; i++)
      words[i] =
          random_pattern(random_bits(seed, (uint64_t)(first + i)), 8, 23, 127);
    return;
  }
  uint16_t *halves = data;
  const int mantissa_bits = dtype == FLASHCPU_DTYPE_F16 ? 10 : 7;
  const int exponent_bits = dtype == FLASHCPU_DTYPE_F16 ? 5 : 8;
  const int bias = dtype == FLASHCPU_DTYPE_F16 ? 15 : 127;
  uint64_t bits = 0;
  for (int64_t i = first; i < first + count; i++, bits >>= 16) {
    if (i == first || i % 4 == 0)
      bits = random_bits(seed, (uint64_t)(i / 4)) >> (16 * (i % 4));
    halves[i - first] = (uint16_t)random_pattern(bits & 0xffff, exponent_bits,
                                                 mantissa_bits, bias);
  }
}

enum { FILL_CHUNK = 1 << 16 }; /* elements per task; a multiple of 4 */

static void fill_random(void *data, flashcpu_dtype dtype, size_t count,
                        uint64_t seed) {
  const int64_t n = (int64_t)count;
  const size_t size =
      dtype == FLASHCPU_DTYPE_Q8_0 ? 1 : flashcpu_dtype_size(dtype);
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < (n + FILL_CHUNK - 1) / FILL_CHUNK; chunk++) {
    const int64_t first = chunk * FILL_CHUNK;
    const int64_t length = n - first < FILL_CHUNK ? n - first : FILL_CHUNK;
    fill_range((char *)data + (size_t)first * size, dtype, first, length, seed);
  }
}

void toolkit_visible_keys(const toolkit_workload_spec *spec, int64_t row,
                          int64_t *begin, int64_t *end) {
  const int64_t position = row + (spec->kv_rows - spec->q_rows);
  int64_t first = 0, last = spec->kv_rows; /* [first, last) */
  if (spec->causal && position + 1 < last) last = position + 1;
  if (spec->window_left >= 0 && position - spec->window_left > first)
    first = position - spec->window_left;
  if (spec->window_right >= 0 && position + spec->window_right + 1 < last)
    last = position + spec->window_right + 1;
  *begin = first;
  *end = last > first ? last : first;
}

bool toolkit_tree_allows(int64_t row, int64_t draft_key) {
  for (int64_t node = row;; node = (node - 1) / 2) {
    if (node == draft_key) return true;
    if (node == 0) return false;
  }
}

/* Rows of K/V some query row sees, and (query, key) pairs, per head. */
static void count_visible(const toolkit_workload_spec *spec,
                          int64_t *union_rows, int64_t *pairs) {
  int64_t lowest = spec->kv_rows, highest = 0;
  const int64_t tree_begin = spec->kv_rows - spec->q_rows;
  *pairs = 0;
  for (int64_t row = 0; row < spec->q_rows; row++) {
    int64_t begin, end;
    toolkit_visible_keys(spec, row, &begin, &end);
    if (begin >= end) continue;
    *pairs += end - begin;
    if (spec->tree_mask) /* the tree hides draft keys off the row's path */
      for (int64_t key = begin > tree_begin ? begin : tree_begin; key < end;
           key++)
        if (!toolkit_tree_allows(row, key - tree_begin)) *pairs -= 1;
    if (begin < lowest) lowest = begin;
    if (end > highest) highest = end;
  }
  /* Consecutive rows' ranges overlap or touch, so their union is one range. */
  *union_rows = highest > lowest ? highest - lowest : 0;
}

/* layer_bytes: the K and V bytes one layer keeps resident. Sets
 * *under_cache when the memory cap keeps the rotated set below the cache
 * target. */
static int decide_layers(const toolkit_workload_spec *spec, size_t layer_bytes,
                         size_t fixed_bytes, bool *under_cache) {
  *under_cache = false;
  /* Decode, verify and serve read a whole KV cache per call, as a model
   * reads one per layer; prefill reuses K and V across many rows. */
  const bool rotates = spec->phase != TOOLKIT_PHASE_PREFILL && layer_bytes > 0;
  if (spec->layers <= 0 && !rotates) return 1;
  toolkit_cpu_info info;
  toolkit_cpu_info_query(&info);
  const uint64_t target = TOOLKIT_CACHE_MULTIPLE * info.llc_total_bytes;
  uint64_t layers = (uint64_t)spec->layers;
  if (spec->layers <= 0) {
    layers = (target + layer_bytes - 1) / layer_bytes;
    if (layers < MIN_DECODE_LAYERS) layers = MIN_DECODE_LAYERS;
    /* Stay within a quarter of RAM: other jobs share these machines. */
    uint64_t budget =
        info.memory_bytes ? info.memory_bytes / 4 : DEFAULT_MEMORY_BUDGET;
    budget = budget > fixed_bytes ? budget - fixed_bytes : 0;
    if (layers * layer_bytes > budget) layers = budget / layer_bytes;
    if (layers < 1) layers = 1;
  }
  *under_cache = rotates && layers * layer_bytes < target;
  return (int)layers;
}

/* Decode batches: batch 0 gets kv / 8 rows, the last batch kv, the others
 * evenly between, as a decode batch mixes short and long sequences. Serve:
 * the same from TOOLKIT_SERVE_SHORTEST_KV. */
static int64_t spread_length(int64_t shortest, int64_t kv, int64_t b,
                             int64_t batch) {
  if (shortest > kv) shortest = kv;
  if (shortest < 1) shortest = 1;
  if (batch == 1) return kv;
  return shortest + (kv - shortest) * b / (batch - 1);
}

static int64_t mixed_length(int64_t kv, int64_t b, int64_t batch) {
  return spread_length(kv / 8, kv, b, batch);
}

/* Batch b's kv length of a spec whose batches' lengths differ. */
static int64_t batch_length(const toolkit_workload_spec *spec, int64_t b) {
  if (spec->shortest_kv > 0)
    return spread_length(spec->shortest_kv, spec->kv_rows, b, spec->batch);
  if (spec->phase == TOOLKIT_PHASE_SERVE)
    return spread_length(TOOLKIT_SERVE_SHORTEST_KV, spec->kv_rows, b,
                         spec->batch);
  return mixed_length(spec->kv_rows, b, spec->batch);
}

/* Whether a spec's batches have lengths of their own. */
static bool lengths_differ(const toolkit_workload_spec *spec) {
  return spec->mixed_kv_lengths || spec->shortest_kv > 0 ||
         spec->phase == TOOLKIT_PHASE_SERVE;
}

int64_t toolkit_workload_kv_length(const toolkit_workload *workload,
                                   int64_t b) {
  return workload->kv_lengths ? workload->kv_lengths[b]
                              : workload->spec.kv_rows;
}

static void *allocate(size_t bytes) {
  return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static int fail(toolkit_workload *workload, char *error, size_t error_size,
                const char *what, size_t bytes) {
  snprintf(error, error_size, "out of memory allocating %zu bytes for %s",
           bytes, what);
  toolkit_workload_free(workload);
  return -1;
}

size_t toolkit_kv_row_bytes(const toolkit_workload_spec *spec) {
  const size_t elements =
      (size_t)(spec->preset->kv_heads * spec->preset->head_dim);
  if (spec->kv_dtype == FLASHCPU_DTYPE_Q8_0) return elements / 32 * 34;
  return elements * flashcpu_dtype_size(spec->kv_dtype);
}

static bool kv_quantized(const toolkit_workload_spec *spec) {
  return spec->kv_dtype >= FLASHCPU_DTYPE_I8 &&
         spec->kv_dtype <= FLASHCPU_DTYPE_Q8_0;
}

/* Stream units of `rows` token rows: bytes when quantized, else elements. */
static int64_t stream_units(const toolkit_workload_spec *spec, int64_t rows) {
  if (kv_quantized(spec)) return rows * (int64_t)toolkit_kv_row_bytes(spec);
  return rows * spec->preset->kv_heads * spec->preset->head_dim;
}

/* The seed of request r's K on layer `layer` (V: + 1), whatever the
 * layout, so that paged and contiguous caches hold the same values. */
static uint64_t kv_seed(const toolkit_workload_spec *spec, int layer,
                        int64_t request) {
  return spec->seed + 0x1000ull * (uint64_t)(layer + 1) +
         0x10ull * (uint64_t)request;
}

/* The draft tree over the newest q_rows keys, repeated for every packed
 * row group (request) of verify. */
static int build_tree(toolkit_workload *workload) {
  const int64_t rows = workload->spec.q_rows;
  const int64_t words = (rows + 63) / 64;
  const int64_t requests = workload->num_requests;
  workload->tree_row_stride = words;
  workload->tree_bits =
      calloc((size_t)(requests * rows * words), sizeof(uint64_t));
  workload->tree_num_keys = calloc((size_t)requests, sizeof(int32_t));
  if (!workload->tree_bits || !workload->tree_num_keys) return -1;
  for (int64_t r = 0; r < requests; r++) {
    workload->tree_num_keys[r] = (int32_t)rows;
    uint64_t *bits = workload->tree_bits + r * rows * words;
    for (int64_t row = 0; row < rows; row++)
      for (int64_t key = 0; key <= row; key++)
        if (toolkit_tree_allows(row, key))
          bits[row * words + key / 64] |= 1ull << (key % 64);
  }
  workload->tree = calloc(1, sizeof *workload->tree);
  if (!workload->tree) return -1;
  workload->tree->bits = workload->tree_bits;
  workload->tree->num_rows = rows;
  workload->tree->num_keys = rows;
  workload->tree->row_stride = words;
  workload->tree->batch_stride = rows * words;
  if (workload->spec.page_size > 0) { /* the plan's: over the packed rows */
    workload->tree->num_rows = requests * rows;
    workload->tree->batch_stride = 0;
    return 0;
  }
  workload->params.tree_mask = workload->tree;
  return 0;
}

/* Requests, their packed rows and kv lengths (and the decode lengths that
 * params.kv_lengths passes). */
static int build_requests(toolkit_workload *workload) {
  const toolkit_workload_spec *spec = &workload->spec;
  const bool serve = spec->phase == TOOLKIT_PHASE_SERVE;
  const int64_t requests = spec->batch + (serve ? 1 : 0);
  workload->num_requests = requests;
  workload->cu_seqlens_q = calloc((size_t)requests + 1, sizeof(int32_t));
  workload->seq_lens_kv = calloc((size_t)requests, sizeof(int32_t));
  if (!workload->cu_seqlens_q || !workload->seq_lens_kv) return -1;
  if (lengths_differ(spec)) {
    workload->kv_lengths = calloc((size_t)spec->batch, sizeof(int64_t));
    if (!workload->kv_lengths) return -1;
    for (int64_t b = 0; b < spec->batch; b++)
      workload->kv_lengths[b] = batch_length(spec, b);
  }
  for (int64_t r = 0; r < requests; r++) {
    const bool chunk = serve && r == spec->batch;
    const int64_t rows = serve && !chunk ? 1 : spec->q_rows;
    workload->cu_seqlens_q[r + 1] = workload->cu_seqlens_q[r] + (int32_t)rows;
    workload->seq_lens_kv[r] =
        (int32_t)(chunk ? spec->prefix_rows + spec->q_rows
                        : toolkit_workload_kv_length(workload, r));
  }
  workload->num_tokens = workload->cu_seqlens_q[requests];
  return 0;
}

static uint64_t next_random(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 33;
}

/* Every request's pages, dealt from a shuffled pool: a block table as an
 * engine's allocator leaves it after many steps, no request's pages in
 * order. */
static int build_block_table(toolkit_workload *workload) {
  const int64_t page_size = workload->spec.page_size;
  int64_t pages = 0, widest = 1;
  for (int64_t r = 0; r < workload->num_requests; r++) {
    const int64_t used = (workload->seq_lens_kv[r] + page_size - 1) / page_size;
    pages += used;
    if (used > widest) widest = used;
  }
  if (pages < 1) pages = 1;
  workload->num_pages = pages;
  workload->block_table_stride = widest;
  int32_t *order = malloc((size_t)pages * sizeof(int32_t));
  workload->block_table =
      calloc((size_t)(workload->num_requests * widest), sizeof(int32_t));
  if (!order || !workload->block_table) {
    free(order);
    return -1;
  }
  for (int64_t p = 0; p < pages; p++) order[p] = (int32_t)p;
  uint64_t state = workload->spec.seed ^ 0xb10c7ab1eull;
  for (int64_t p = pages - 1; p > 0; p--) { /* Fisher-Yates */
    const int64_t other = (int64_t)(next_random(&state) % (uint64_t)(p + 1));
    const int32_t swap = order[p];
    order[p] = order[other];
    order[other] = swap;
  }
  int64_t dealt = 0;
  for (int64_t r = 0; r < workload->num_requests; r++) {
    const int64_t used = (workload->seq_lens_kv[r] + page_size - 1) / page_size;
    for (int64_t i = 0; i < used; i++)
      workload->block_table[r * widest + i] = order[dealt++];
  }
  free(order);
  return 0;
}

/* Fills one layer's page pools: token j of request r gets the values that
 * row j of batch r of a contiguous cache gets; slots past a request's
 * length are zeroed (never read, but not left uninitialized). */
static void fill_pages(const toolkit_workload *workload, int layer, void *k,
                       void *v) {
  const toolkit_workload_spec *spec = &workload->spec;
  const int64_t page_size = spec->page_size;
  const int64_t stride = workload->block_table_stride;
  const size_t row_bytes = toolkit_kv_row_bytes(spec);
  const int64_t slots = workload->num_requests * stride;
  /* One task per block-table slot: pages are small (page_size 1 is one
   * token), so a parallel region per page would cost more than the fill. */
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t slot = 0; slot < slots; slot++) {
    const int64_t r = slot / stride, i = slot % stride;
    const int64_t length = workload->seq_lens_kv[r];
    if (i * page_size >= length) continue;
    const int64_t tokens =
        length - i * page_size < page_size ? length - i * page_size : page_size;
    const size_t offset =
        (size_t)workload->block_table[slot] * (size_t)page_size * row_bytes;
    const uint64_t seed = kv_seed(spec, layer, r);
    fill_range((char *)k + offset, spec->kv_dtype,
               stream_units(spec, i * page_size), stream_units(spec, tokens),
               seed);
    fill_range((char *)v + offset, spec->kv_dtype,
               stream_units(spec, i * page_size), stream_units(spec, tokens),
               seed + 1);
    const size_t filled = (size_t)tokens * row_bytes;
    const size_t rest = (size_t)(page_size - tokens) * row_bytes;
    memset((char *)k + offset + filled, 0, rest);
    memset((char *)v + offset + filled, 0, rest);
  }
}

/* Quantized K/V: each layer's scales (I8 0.01 and U8 0.01 with zero 128
 * per token and head, F8 0.5 per tensor) and the views of them. */
static int build_scales(toolkit_workload *workload, char *error,
                        size_t error_size) {
  const toolkit_workload_spec *spec = &workload->spec;
  const flashcpu_dtype dtype = spec->kv_dtype;
  if (!kv_quantized(spec) || dtype == FLASHCPU_DTYPE_Q8_0) return 0;
  const bool per_token =
      dtype == FLASHCPU_DTYPE_I8 || dtype == FLASHCPU_DTYPE_U8;
  const bool zeros = dtype == FLASHCPU_DTYPE_U8;
  const int64_t H = spec->preset->kv_heads;
  const int64_t tokens = spec->page_size > 0
                             ? workload->num_pages * spec->page_size
                             : spec->batch * spec->kv_rows;
  const int64_t token_stride =
      spec->page_size > 0 ? spec->page_size : spec->kv_rows;
  workload->scale_floats = per_token ? (size_t)(tokens * H) : 1;
  const int count = workload->layer_count;
  workload->scale_layers = calloc((size_t)count, sizeof(float *));
  workload->k_scales = calloc((size_t)count, sizeof(flashcpu_kv_scales));
  workload->v_scales = calloc((size_t)count, sizeof(flashcpu_kv_scales));
  if (!workload->scale_layers || !workload->k_scales || !workload->v_scales)
    return fail(workload, error, error_size, "the scale tables", 0);
  for (int layer = 0; layer < count; layer++) {
    const size_t n = workload->scale_floats;
    float *all = malloc(4 * n * sizeof(float));
    if (!all) return fail(workload, error, error_size, "scales", 4 * n * 4);
    workload->scale_layers[layer] = all;
    for (size_t i = 0; i < 2 * n; i++) all[i] = per_token ? 0.01f : 0.5f;
    for (size_t i = 2 * n; i < 4 * n; i++) all[i] = 128.0f;
    flashcpu_kv_scales *views[2] = {&workload->k_scales[layer],
                                    &workload->v_scales[layer]};
    for (int s = 0; s < 2; s++) {
      views[s]->data = all + (size_t)s * n;
      views[s]->dtype = FLASHCPU_DTYPE_F32;
      if (per_token) {
        views[s]->strides[0] = token_stride * H;
        views[s]->strides[1] = H;
        views[s]->strides[2] = 1;
      }
      views[s]->zero_points = zeros ? all + (size_t)(2 + s) * n : NULL;
    }
  }
  return 0;
}

/* Layer tables, then each layer's K and V filled. */
static int build_layers(toolkit_workload *workload, char *error,
                        size_t error_size) {
  const toolkit_workload_spec *spec = &workload->spec;
  const bool paged = spec->page_size > 0;
  const bool chunk = spec->phase == TOOLKIT_PHASE_SERVE && !paged;
  const size_t row_bytes = toolkit_kv_row_bytes(spec);
  const int count = workload->layer_count;
  workload->k_layers = calloc((size_t)count, sizeof(void *));
  workload->v_layers = calloc((size_t)count, sizeof(void *));
  if (chunk) {
    workload->chunk_k_layers = calloc((size_t)count, sizeof(void *));
    workload->chunk_v_layers = calloc((size_t)count, sizeof(void *));
  }
  if (!workload->k_layers || !workload->v_layers ||
      (chunk && (!workload->chunk_k_layers || !workload->chunk_v_layers)))
    return fail(workload, error, error_size, "layer tables", 0);
  for (int layer = 0; layer < count; layer++) {
    workload->k_layers[layer] = allocate(workload->kv_bytes);
    workload->v_layers[layer] = allocate(workload->kv_bytes);
    if (!workload->k_layers[layer] || !workload->v_layers[layer])
      return fail(workload, error, error_size, "a layer's K and V",
                  2 * workload->kv_bytes);
    if (paged) {
      fill_pages(workload, layer, workload->k_layers[layer],
                 workload->v_layers[layer]);
      continue;
    }
    /* Only rows within each batch's length: the rest are never read, and
     * pages never touched cost no memory. */
    for (int64_t b = 0; b < spec->batch; b++) {
      const size_t offset = (size_t)(b * spec->kv_rows) * row_bytes;
      const size_t elements =
          (size_t)stream_units(spec, toolkit_workload_kv_length(workload, b));
      const uint64_t seed = kv_seed(spec, layer, b);
      fill_random((char *)workload->k_layers[layer] + offset, spec->kv_dtype,
                  elements, seed);
      fill_random((char *)workload->v_layers[layer] + offset, spec->kv_dtype,
                  elements, seed + 1);
    }
    if (!chunk) continue;
    workload->chunk_k_layers[layer] = allocate(workload->chunk_kv_bytes);
    workload->chunk_v_layers[layer] = allocate(workload->chunk_kv_bytes);
    if (!workload->chunk_k_layers[layer] || !workload->chunk_v_layers[layer])
      return fail(workload, error, error_size, "a layer's chunk K and V",
                  2 * workload->chunk_kv_bytes);
    const size_t elements =
        (size_t)stream_units(spec, spec->prefix_rows + spec->q_rows);
    const uint64_t seed = kv_seed(spec, layer, spec->batch);
    fill_random(workload->chunk_k_layers[layer], spec->kv_dtype, elements,
                seed);
    fill_random(workload->chunk_v_layers[layer], spec->kv_dtype, elements,
                seed + 1);
  }
  return 0;
}

toolkit_workload_spec
toolkit_workload_request_spec(const toolkit_workload *workload,
                              int64_t request) {
  toolkit_workload_spec spec = workload->spec;
  spec.batch = 1;
  spec.mixed_kv_lengths = false;
  spec.shortest_kv = 0;
  spec.q_rows =
      workload->cu_seqlens_q[request + 1] - workload->cu_seqlens_q[request];
  spec.kv_rows = workload->seq_lens_kv[request];
  return spec;
}

static int check_spec(const toolkit_workload_spec *spec, char *error,
                      size_t error_size) {
  const toolkit_preset *preset = spec->preset;
  if (!preset || spec->batch < 1 || spec->q_rows < 1 || spec->kv_rows < 1) {
    snprintf(error, error_size, "batch, rows and kv must be at least 1");
    return -1;
  }
  if (spec->page_size < 0 || spec->prefix_rows < 0) {
    snprintf(error, error_size, "page size and prefix must be at least 0");
    return -1;
  }
  if (spec->shortest_kv < 0 || spec->shortest_kv > spec->kv_rows) {
    snprintf(error, error_size, "the shortest kv length must be 0 to kv");
    return -1;
  }
  if (spec->tree_mask && spec->phase != TOOLKIT_PHASE_SERVE &&
      spec->q_rows >
          (lengths_differ(spec) ? batch_length(spec, 0) : spec->kv_rows)) {
    snprintf(error, error_size, "a tree mask needs rows <= every kv length");
    return -1;
  }
  /* Far beyond any real model; also keeps the size arithmetic exact. */
  const double rows = (double)(spec->q_rows + spec->kv_rows) +
                      (spec->phase == TOOLKIT_PHASE_SERVE
                           ? (double)(spec->q_rows + spec->prefix_rows)
                           : 0.0);
  if ((double)spec->batch * rows * (double)preset->q_heads *
          (double)preset->head_dim * 4.0 >
      (double)(INT64_C(1) << 50)) {
    snprintf(error, error_size, "the workload is too large");
    return -1;
  }
  /* The paged API's lengths, rows and page numbers are int32. */
  const double packed = (double)spec->batch * (double)spec->q_rows;
  if (packed + (double)spec->q_rows >= 2147483647.0 ||
      (double)spec->prefix_rows + (double)spec->q_rows >= 2147483647.0 ||
      (spec->page_size > 0 &&
       (double)spec->batch * ((double)spec->kv_rows + 1.0) >= 2147483647.0)) {
    snprintf(error, error_size, "the workload's rows exceed int32");
    return -1;
  }
  return 0;
}

int toolkit_workload_build(const toolkit_workload_spec *spec,
                           toolkit_workload *workload, char *error,
                           size_t error_size) {
  memset(workload, 0, sizeof *workload);
  if (check_spec(spec, error, error_size) != 0) return -1;
  const toolkit_preset *preset = spec->preset;
  workload->spec = *spec;
  const bool serve = spec->phase == TOOLKIT_PHASE_SERVE;
  const bool paged = spec->page_size > 0;
  if (serve) workload->spec.tree_mask = false;
  if (serve && !paged && kv_quantized(spec)) {
    snprintf(error, error_size,
             "a serving step on quantized K/V runs on pages (--page-size)");
    return -1;
  }
  if (spec->kv_dtype == FLASHCPU_DTYPE_Q8_0 && preset->head_dim % 32 != 0) {
    snprintf(error, error_size,
             "q8_0 needs a head_dim that is a multiple of 32");
    return -1;
  }
  const int64_t D = preset->head_dim;
  if (build_requests(workload) != 0)
    return fail(workload, error, error_size, "the request lengths", 0);
  const size_t q_count = (size_t)(workload->num_tokens * preset->q_heads * D);
  workload->q_bytes = q_count * flashcpu_dtype_size(spec->q_dtype);
  workload->out_bytes = q_count * flashcpu_dtype_size(spec->out_dtype);
  const size_t row_bytes = toolkit_kv_row_bytes(spec);
  int64_t filled_rows = 0;
  for (int64_t r = 0; r < workload->num_requests; r++)
    filled_rows += workload->seq_lens_kv[r];
  if (paged) {
    if (build_block_table(workload) != 0)
      return fail(workload, error, error_size, "the block table", 0);
    workload->kv_bytes =
        (size_t)(workload->num_pages * spec->page_size) * row_bytes;
    workload->layer_bytes = 2 * workload->kv_bytes;
  } else {
    workload->kv_bytes = (size_t)(spec->batch * spec->kv_rows) * row_bytes;
    if (serve)
      workload->chunk_kv_bytes =
          (size_t)(spec->prefix_rows + spec->q_rows) * row_bytes;
    workload->layer_bytes = 2 * (size_t)filled_rows * row_bytes;
  }
  workload->layer_count = decide_layers(spec, workload->layer_bytes,
                                        workload->q_bytes + workload->out_bytes,
                                        &workload->rotation_under_cache);

  workload->q = allocate(workload->q_bytes);
  if (!workload->q)
    return fail(workload, error, error_size, "q", workload->q_bytes);
  workload->out = allocate(workload->out_bytes);
  if (!workload->out)
    return fail(workload, error, error_size, "out", workload->out_bytes);
  fill_random(workload->q, spec->q_dtype, q_count, spec->seed);
  /* Written once so its pages exist before timing; the library overwrites it.
   */
  memset(workload->out, 0, workload->out_bytes);
  if (build_layers(workload, error, error_size) != 0) return -1;
  if (build_scales(workload, error, error_size) != 0) return -1;

  flashcpu_attention_params_init(&workload->params);
  workload->params.flags = spec->causal ? FLASHCPU_FLAG_CAUSAL : 0u;
  workload->params.window_left = spec->window_left;
  workload->params.window_right = spec->window_right;
  workload->params.softcap = spec->softcap;
  workload->chunk_params = workload->params;
  if (!paged) workload->params.kv_lengths = workload->kv_lengths;
  if (workload->spec.tree_mask && build_tree(workload) != 0)
    return fail(workload, error, error_size, "the tree mask", 0);

  /* Masks align to each request's own lengths, so count request by
   * request. */
  double kv_rows_read = 0.0, all_pairs = 0.0;
  for (int64_t r = 0; r < workload->num_requests; r++) {
    const toolkit_workload_spec request_spec =
        toolkit_workload_request_spec(workload, r);
    int64_t union_rows, pairs;
    count_visible(&request_spec, &union_rows, &pairs);
    kv_rows_read += (double)union_rows;
    all_pairs += (double)pairs;
  }
  workload->visible_pairs =
      (int64_t)(all_pairs / (double)workload->num_requests);
  /* Quantized: the scales a row reads count too. */
  const double scale_bytes =
      workload->scale_floats > 1
          ? (double)(preset->kv_heads * 4) *
                (spec->kv_dtype == FLASHCPU_DTYPE_U8 ? 2.0 : 1.0)
          : 0.0;
  workload->bytes_per_call =
      kv_rows_read * 2.0 * ((double)row_bytes + scale_bytes) +
      (double)workload->q_bytes + (double)workload->out_bytes;
  workload->flops_per_call =
      4.0 * (double)preset->q_heads * (double)D * all_pairs;
  return 0;
}

static void free_layers(void **layers, int count) {
  for (int layer = 0; layers && layer < count; layer++) free(layers[layer]);
  free(layers);
}

void toolkit_workload_free(toolkit_workload *workload) {
  free_layers(workload->k_layers, workload->layer_count);
  free_layers(workload->v_layers, workload->layer_count);
  free_layers(workload->chunk_k_layers, workload->layer_count);
  free_layers(workload->chunk_v_layers, workload->layer_count);
  free_layers((void **)workload->scale_layers, workload->layer_count);
  free(workload->k_scales);
  free(workload->v_scales);
  free(workload->q);
  free(workload->out);
  free(workload->tree);
  free(workload->tree_bits);
  free(workload->tree_num_keys);
  free(workload->kv_lengths);
  free(workload->cu_seqlens_q);
  free(workload->seq_lens_kv);
  free(workload->block_table);
  memset(workload, 0, sizeof *workload);
}

toolkit_bound toolkit_workload_bound(const toolkit_workload *workload,
                                     const toolkit_ceilings *ceilings) {
  switch (workload->spec.phase) {
  case TOOLKIT_PHASE_DECODE:
  case TOOLKIT_PHASE_SERVE:
    return TOOLKIT_BOUND_READ;
  case TOOLKIT_PHASE_PREFILL:
    return TOOLKIT_BOUND_FMA;
  default: {
    double read_floor = workload->bytes_per_call / ceilings->read_gbps;
    double fma_floor = workload->flops_per_call / ceilings->fma_gflops;
    return read_floor >= fma_floor ? TOOLKIT_BOUND_READ : TOOLKIT_BOUND_FMA;
  }
  }
}

double toolkit_ceiling_percent(const toolkit_workload *workload,
                               const toolkit_ceilings *ceilings, double seconds,
                               const char *kernels) {
  if (toolkit_workload_bound(workload, ceilings) == TOOLKIT_BOUND_READ)
    return 100.0 * workload->bytes_per_call * 1e-9 / seconds /
           ceilings->read_gbps;
  return 100.0 * workload->flops_per_call * 1e-9 / seconds /
         toolkit_unit_gflops(ceilings, toolkit_unit_of_kernels(kernels));
}
