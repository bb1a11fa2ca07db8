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

static void fill_random(void *data, flashcpu_dtype dtype, size_t count,
                        uint64_t seed) {
  const int64_t n = (int64_t)count;
  if (dtype == FLASHCPU_DTYPE_F32) {
    uint32_t *words = data;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
      words[i] = random_pattern(random_bits(seed, (uint64_t)i), 8, 23, 127);
  } else {
    /* One 64-bit draw gives four 16-bit values. */
    uint16_t *halves = data;
    const int mantissa_bits = dtype == FLASHCPU_DTYPE_F16 ? 10 : 7;
    const int exponent_bits = dtype == FLASHCPU_DTYPE_F16 ? 5 : 8;
    const int bias = dtype == FLASHCPU_DTYPE_F16 ? 15 : 127;
#pragma omp parallel for schedule(static)
    for (int64_t group = 0; group < (n + 3) / 4; group++) {
      uint64_t bits = random_bits(seed, (uint64_t)group);
      for (int64_t i = group * 4; i < group * 4 + 4 && i < n; i++, bits >>= 16)
        halves[i] = (uint16_t)random_pattern(bits & 0xffff, exponent_bits,
                                             mantissa_bits, bias);
    }
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

/* layer_bytes: the K and V bytes one layer fills. Sets *under_cache when
 * the memory cap keeps the rotated set below the cache target. */
static int decide_layers(const toolkit_workload_spec *spec, size_t layer_bytes,
                         size_t fixed_bytes, bool *under_cache) {
  *under_cache = false;
  /* Decode and verify read a whole KV cache per call, as a model reads one
   * per layer; prefill reuses K and V across many rows. */
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

/* Batch 0 gets kv / 8 rows, the last batch kv, the others evenly between:
 * a decode batch mixes short and long sequences. */
static int64_t mixed_length(int64_t kv, int64_t b, int64_t batch) {
  const int64_t shortest = kv / 8 > 0 ? kv / 8 : 1;
  if (batch == 1) return kv;
  return shortest + (kv - shortest) * b / (batch - 1);
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

/* The draft tree over the newest q_rows keys, shared across the batch. */
static int build_tree(toolkit_workload *workload) {
  const int64_t rows = workload->spec.q_rows;
  const int64_t words = (rows + 63) / 64;
  workload->tree_bits = calloc((size_t)(rows * words), sizeof(uint64_t));
  workload->tree = calloc(1, sizeof *workload->tree);
  if (!workload->tree_bits || !workload->tree) return -1;
  for (int64_t row = 0; row < rows; row++)
    for (int64_t key = 0; key <= row; key++)
      if (toolkit_tree_allows(row, key))
        workload->tree_bits[row * words + key / 64] |= 1ull << (key % 64);
  workload->tree->bits = workload->tree_bits;
  workload->tree->num_rows = rows;
  workload->tree->num_keys = rows;
  workload->tree->row_stride = words;
  workload->tree->batch_stride = 0;
  workload->params.tree_mask = workload->tree;
  return 0;
}

int toolkit_workload_build(const toolkit_workload_spec *spec,
                           toolkit_workload *workload, char *error,
                           size_t error_size) {
  memset(workload, 0, sizeof *workload);
  const toolkit_preset *preset = spec->preset;
  if (!preset || spec->batch < 1 || spec->q_rows < 1 || spec->kv_rows < 1) {
    snprintf(error, error_size, "batch, rows and kv must be at least 1");
    return -1;
  }
  if (spec->tree_mask &&
      spec->q_rows > mixed_length(spec->kv_rows, 0,
                                  spec->mixed_kv_lengths ? spec->batch : 1)) {
    snprintf(error, error_size, "a tree mask needs rows <= every kv length");
    return -1;
  }
  /* Far beyond any real model; also keeps the size arithmetic exact. */
  if ((double)spec->batch * (double)(spec->q_rows + spec->kv_rows) *
          (double)preset->q_heads * (double)preset->head_dim * 4.0 >
      (double)(INT64_C(1) << 50)) {
    snprintf(error, error_size, "the workload is too large");
    return -1;
  }
  workload->spec = *spec;
  const int64_t D = preset->head_dim;
  const size_t q_count = (size_t)(spec->batch * spec->q_rows * preset->q_heads * D);
  const size_t kv_count =
      (size_t)(spec->batch * spec->kv_rows * preset->kv_heads * D);
  workload->q_bytes = q_count * flashcpu_dtype_size(spec->q_dtype);
  workload->out_bytes = q_count * flashcpu_dtype_size(spec->out_dtype);
  workload->kv_bytes = kv_count * flashcpu_dtype_size(spec->kv_dtype);
  const size_t row_bytes =
      (size_t)(preset->kv_heads * D) * flashcpu_dtype_size(spec->kv_dtype);
  if (spec->mixed_kv_lengths) {
    workload->kv_lengths = calloc((size_t)spec->batch, sizeof(int64_t));
    if (!workload->kv_lengths)
      return fail(workload, error, error_size, "kv lengths", 0);
    for (int64_t b = 0; b < spec->batch; b++)
      workload->kv_lengths[b] = mixed_length(spec->kv_rows, b, spec->batch);
  }
  int64_t filled_rows = 0;
  for (int64_t b = 0; b < spec->batch; b++)
    filled_rows += toolkit_workload_kv_length(workload, b);
  workload->layer_bytes = 2 * (size_t)filled_rows * row_bytes;
  workload->layer_count =
      decide_layers(spec, workload->layer_bytes,
                    workload->q_bytes + workload->out_bytes,
                    &workload->rotation_under_cache);

  workload->q = allocate(workload->q_bytes);
  if (!workload->q) return fail(workload, error, error_size, "q", workload->q_bytes);
  workload->out = allocate(workload->out_bytes);
  if (!workload->out)
    return fail(workload, error, error_size, "out", workload->out_bytes);
  workload->k_layers = calloc((size_t)workload->layer_count, sizeof(void *));
  workload->v_layers = calloc((size_t)workload->layer_count, sizeof(void *));
  if (!workload->k_layers || !workload->v_layers)
    return fail(workload, error, error_size, "layer tables", 0);
  fill_random(workload->q, spec->q_dtype, q_count, spec->seed);
  /* Written once so its pages exist before timing; the library overwrites it. */
  memset(workload->out, 0, workload->out_bytes);
  for (int layer = 0; layer < workload->layer_count; layer++) {
    workload->k_layers[layer] = allocate(workload->kv_bytes);
    workload->v_layers[layer] = allocate(workload->kv_bytes);
    if (!workload->k_layers[layer] || !workload->v_layers[layer])
      return fail(workload, error, error_size, "a layer's K and V",
                  2 * workload->kv_bytes);
    /* Only rows within each batch's length: the rest are never read, and
     * pages never touched cost no memory. */
    for (int64_t b = 0; b < spec->batch; b++) {
      const size_t offset = (size_t)(b * spec->kv_rows) * row_bytes;
      const size_t count = (size_t)(toolkit_workload_kv_length(workload, b) *
                                    preset->kv_heads * D);
      const uint64_t seed = spec->seed + 0x1000ull * (uint64_t)(layer + 1) +
                            0x10ull * (uint64_t)b;
      fill_random((char *)workload->k_layers[layer] + offset, spec->kv_dtype,
                  count, seed);
      fill_random((char *)workload->v_layers[layer] + offset, spec->kv_dtype,
                  count, seed + 1);
    }
  }

  flashcpu_attention_params_init(&workload->params);
  workload->params.flags = spec->causal ? FLASHCPU_FLAG_CAUSAL : 0u;
  workload->params.window_left = spec->window_left;
  workload->params.window_right = spec->window_right;
  workload->params.softcap = spec->softcap;
  workload->params.kv_lengths = workload->kv_lengths;
  if (spec->tree_mask && build_tree(workload) != 0)
    return fail(workload, error, error_size, "the tree mask", 0);

  /* Masks align to each batch's own length, so count batch by batch. */
  double kv_rows_read = 0.0, all_pairs = 0.0;
  for (int64_t b = 0; b < spec->batch; b++) {
    toolkit_workload_spec batch_spec = *spec;
    batch_spec.kv_rows = toolkit_workload_kv_length(workload, b);
    int64_t union_rows, pairs;
    count_visible(&batch_spec, &union_rows, &pairs);
    kv_rows_read += (double)union_rows;
    all_pairs += (double)pairs;
  }
  workload->visible_pairs = (int64_t)(all_pairs / (double)spec->batch);
  workload->bytes_per_call = kv_rows_read * 2.0 * (double)row_bytes +
                             (double)workload->q_bytes +
                             (double)workload->out_bytes;
  workload->flops_per_call =
      4.0 * (double)preset->q_heads * (double)D * all_pairs;
  return 0;
}

void toolkit_workload_free(toolkit_workload *workload) {
  for (int layer = 0; layer < workload->layer_count; layer++) {
    if (workload->k_layers) free(workload->k_layers[layer]);
    if (workload->v_layers) free(workload->v_layers[layer]);
  }
  free(workload->k_layers);
  free(workload->v_layers);
  free(workload->q);
  free(workload->out);
  free(workload->tree);
  free(workload->tree_bits);
  free(workload->kv_lengths);
  memset(workload, 0, sizeof *workload);
}

toolkit_bound toolkit_workload_bound(const toolkit_workload *workload,
                                     const toolkit_ceilings *ceilings) {
  switch (workload->spec.phase) {
  case TOOLKIT_PHASE_DECODE:
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
                               const toolkit_ceilings *ceilings,
                               double seconds) {
  if (toolkit_workload_bound(workload, ceilings) == TOOLKIT_BOUND_READ)
    return 100.0 * workload->bytes_per_call * 1e-9 / seconds /
           ceilings->read_gbps;
  return 100.0 * workload->flops_per_call * 1e-9 / seconds /
         ceilings->fma_gflops;
}

void toolkit_workload_tensors(const toolkit_workload *workload, int layer,
                              flashcpu_tensor *q, flashcpu_tensor *k,
                              flashcpu_tensor *v, flashcpu_tensor *out) {
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  layer %= workload->layer_count;
  *q = flashcpu_tensor_bshd(workload->q, spec->q_dtype, spec->batch,
                            spec->q_rows, preset->q_heads, preset->head_dim);
  *k = flashcpu_tensor_bshd(workload->k_layers[layer], spec->kv_dtype,
                            spec->batch, spec->kv_rows, preset->kv_heads,
                            preset->head_dim);
  *v = flashcpu_tensor_bshd(workload->v_layers[layer], spec->kv_dtype,
                            spec->batch, spec->kv_rows, preset->kv_heads,
                            preset->head_dim);
  *out = flashcpu_tensor_bshd(workload->out, spec->out_dtype, spec->batch,
                              spec->q_rows, preset->q_heads, preset->head_dim);
}
