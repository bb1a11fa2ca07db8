/* One serving step of an inference engine on a paged KV cache.
 *
 * The engine keeps every layer's K and V in pages of PAGE_SIZE tokens, a
 * pool of NUM_PAGES pages per layer (NHD: [page, slot, kv head, head_dim],
 * bfloat16), and gives each request a list of pages from a free list. One
 * step packs the new query rows of four requests of different kinds into
 * one ragged batch:
 *
 *   decode    1 new row,  37 tokens cached
 *   decode    1 new row,  100 tokens cached
 *   verify    4 draft rows under a tree mask (speculative decoding), 50
 *             tokens cached
 *   prefill   a chunk of 24 rows of a long prompt, 32 tokens cached (the
 *             chunk before it)
 *
 * Per step the engine appends the step's new K/V rows into their pages
 * (flashcpu_kv_append, through a slot mapping), makes one plan
 * (flashcpu_plan_create) and calls flashcpu_attention_paged once per layer.
 * The program checks every output row and log-sum-exp of every layer
 * against a float64 softmax over the same values, prints "ok" and exits 0,
 * or exits 1 on a mismatch.
 *
 * Build against an installed flashcpu:
 *   cc paged_serving_step.c $(pkg-config --cflags --libs flashcpu) -lm
 * (tests/install builds and runs it, see tests/install/CMakeLists.txt). */
#include <flashcpu/flashcpu.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  LAYERS = 3,
  Q_HEADS = 8,
  KV_HEADS = 2, /* GQA: 4 query heads share a kv head */
  HEAD_DIM = 64,
  PAGE_SIZE = 16,
  NUM_PAGES = 32, /* per layer */
  MAX_PAGES = 8,  /* block table row: room for 128 tokens */
  REQUESTS = 4,
  MAX_ROWS = 64,   /* packed query rows of one step */
  MAX_APPEND = 256 /* K/V rows of one flashcpu_kv_append */
};

/* -------------------------------------------------------- page allocator */

/* A free list of page numbers, shared by every layer: page p of a request
 * is page p of each layer's pool. */
typedef struct page_pool {
  int32_t free_pages[NUM_PAGES];
  int free_count;
} page_pool;

static void pool_init(page_pool *pool) {
  /* A scattered order, as the pool looks after many steps: a request's
   * pages are not next to each other. */
  for (int i = 0; i < NUM_PAGES; i++)
    pool->free_pages[i] = (int32_t)((i * 7) % NUM_PAGES);
  pool->free_count = NUM_PAGES;
}

static int32_t page_alloc(page_pool *pool) {
  return pool->free_count > 0 ? pool->free_pages[--pool->free_count] : -1;
}

static void page_free(page_pool *pool, int32_t page) {
  pool->free_pages[pool->free_count++] = page;
}

/* --------------------------------------------------------------- requests */

typedef enum request_kind { DECODE, VERIFY, PREFILL } request_kind;

typedef struct request {
  const char *kind_name;
  request_kind kind;
  int cached;   /* tokens whose K/V are already in the cache */
  int new_rows; /* this step's query rows, and its new K/V rows */
  int32_t pages[MAX_PAGES];
  int num_pages;
} request;

/* Takes pages from the pool until the request has room for `tokens`. */
static int reserve(request *r, page_pool *pool, int tokens) {
  while (r->num_pages * PAGE_SIZE < tokens) {
    const int32_t page = page_alloc(pool);
    if (page < 0 || r->num_pages == MAX_PAGES) return -1;
    r->pages[r->num_pages++] = page;
  }
  return 0;
}

/* The cache slot of the request's token t: page * PAGE_SIZE + offset. */
static int64_t slot_of(const request *r, int t) {
  return (int64_t)r->pages[t / PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE;
}

/* The draft tree of the verify request: draft 0 is the root, 1 and 2 its
 * children, 3 a child of 1. A draft row sees the cached tokens, its
 * ancestors and itself. */
static const int draft_parent[4] = {-1, 0, 0, 1};

static int draft_sees(int row, int draft) {
  for (int node = row; node >= 0; node = draft_parent[node])
    if (node == draft) return 1;
  return 0;
}

/* ---------------------------------------------------------- model values */

/* Stand-ins for what a model computes: q, k or v (which = 0, 1, 2) of
 * layer, request, token position, head and element, in [-1, 1). The same
 * numbers for the cache and for the reference. */
static float model_value(int which, int layer, int request_index, int token,
                         int head, int d) {
  uint32_t x =
      (uint32_t)(((((which * 7 + layer) * 13 + request_index) * 1031 + token) *
                      17 +
                  head) *
                     131 +
                 d);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return (float)(x >> 8) / 8388608.0f - 1.0f;
}

/* What the bfloat16 cache holds for a value: rounded to nearest even, as
 * flashcpu_kv_append converts it. */
static double as_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float rounded;
  memcpy(&rounded, &bits, sizeof rounded);
  return rounded;
}

/* K/V rows [1, rows, KV_HEADS, HEAD_DIM] of (request, first token + row)
 * pairs, float32, as a layer's projection would hand them over. */
static void model_kv_rows(int layer, const int *row_request,
                          const int *row_token, int rows, float *k, float *v) {
  for (int t = 0; t < rows; t++)
    for (int h = 0; h < KV_HEADS; h++)
      for (int d = 0; d < HEAD_DIM; d++) {
        const size_t at =
            ((size_t)t * KV_HEADS + (size_t)h) * HEAD_DIM + (size_t)d;
        k[at] = model_value(1, layer, row_request[t], row_token[t], h, d);
        v[at] = model_value(2, layer, row_request[t], row_token[t], h, d);
      }
}

/* ------------------------------------------------------------- reference */

/* Output row (request r, query head h, its row i) of one layer in double:
 * softmax over the keys the row may see (causal, aligned bottom-right; the
 * tree among a verify request's drafts) of the bf16 K and V. Returns the
 * largest difference from what flashcpu wrote (out row and lse). */
static double check_row(int layer, int r, const request *req, int h, int i,
                        const float *out_row, float lse) {
  const int keys = req->cached + req->new_rows;
  const int position = keys - req->new_rows + i;
  const int kv_head = h / (Q_HEADS / KV_HEADS);
  const double scale = 1.0 / sqrt((double)HEAD_DIM);
  double scores[MAX_PAGES * PAGE_SIZE], largest = -INFINITY, sum = 0.0;
  int visible[MAX_PAGES * PAGE_SIZE];
  for (int j = 0; j < keys; j++) {
    visible[j] = j <= position;
    if (req->kind == VERIFY && j >= req->cached)
      visible[j] = draft_sees(i, j - req->cached);
    if (!visible[j]) continue;
    double dot = 0.0;
    for (int d = 0; d < HEAD_DIM; d++)
      dot += (double)model_value(0, layer, r, position, h, d) *
             as_bf16(model_value(1, layer, r, j, kv_head, d));
    scores[j] = dot * scale;
    if (scores[j] > largest) largest = scores[j];
  }
  for (int j = 0; j < keys; j++)
    if (visible[j]) sum += exp(scores[j] - largest);
  double worst = fabs((double)lse - (largest + log(sum)));
  for (int d = 0; d < HEAD_DIM; d++) {
    double expected = 0.0;
    for (int j = 0; j < keys; j++)
      if (visible[j])
        expected += exp(scores[j] - largest) / sum *
                    as_bf16(model_value(2, layer, r, j, kv_head, d));
    const double error = fabs((double)out_row[d] - expected);
    if (!(error <= worst)) worst = error; /* NaN counts as a mismatch */
  }
  return worst;
}

static int failed(flashcpu_context *ctx, const char *call,
                  flashcpu_status status) {
  fprintf(stderr, "%s: %s: %s\n", call, flashcpu_status_name(status),
          flashcpu_last_error(ctx));
  return 1;
}

int main(void) {
  flashcpu_context *ctx = NULL;
  flashcpu_status status = flashcpu_context_create(NULL, &ctx);
  if (status != FLASHCPU_OK) return failed(NULL, "context", status);

  /* Each layer's pages: K and V pools [NUM_PAGES, PAGE_SIZE, KV_HEADS,
   * HEAD_DIM] of bfloat16. */
  const size_t pool_elements =
      (size_t)NUM_PAGES * PAGE_SIZE * KV_HEADS * HEAD_DIM;
  uint16_t *k_pool[LAYERS], *v_pool[LAYERS];
  flashcpu_paged_kv cache[LAYERS];
  for (int layer = 0; layer < LAYERS; layer++) {
    k_pool[layer] = calloc(pool_elements, sizeof(uint16_t));
    v_pool[layer] = calloc(pool_elements, sizeof(uint16_t));
    if (!k_pool[layer] || !v_pool[layer]) return 1;
    cache[layer] =
        flashcpu_paged_kv_nhd(k_pool[layer], v_pool[layer], FLASHCPU_DTYPE_BF16,
                              NUM_PAGES, PAGE_SIZE, KV_HEADS, HEAD_DIM);
  }
  page_pool pool;
  pool_init(&pool);
  request requests[REQUESTS] = {
      {"decode", DECODE, 37, 1, {0}, 0},
      {"decode", DECODE, 100, 1, {0}, 0},
      {"verify", VERIFY, 50, 4, {0}, 0},
      {"prefill", PREFILL, 32, 24, {0}, 0},
  };

  /* Packed rows: the step's new rows, and (once, below) the cached tokens
   * that earlier steps wrote. */
  static float q[MAX_ROWS * Q_HEADS * HEAD_DIM];
  static float out[MAX_ROWS * Q_HEADS * HEAD_DIM];
  static float lse[Q_HEADS * MAX_ROWS];
  static float k_new[MAX_APPEND * KV_HEADS * HEAD_DIM];
  static float v_new[MAX_APPEND * KV_HEADS * HEAD_DIM];
  static int64_t slot_mapping[MAX_APPEND];
  static int row_request[MAX_APPEND]; /* which request a row belongs to */
  static int row_token[MAX_APPEND];   /* and its position there */

  /* Earlier steps: the cached tokens' pages and K/V, as the engine wrote
   * them when it computed those tokens. */
  int rows = 0;
  for (int r = 0; r < REQUESTS; r++) {
    if (reserve(&requests[r], &pool, requests[r].cached) != 0) return 1;
    for (int t = 0; t < requests[r].cached; t++, rows++) {
      row_request[rows] = r;
      row_token[rows] = t;
      slot_mapping[rows] = slot_of(&requests[r], t);
    }
  }
  for (int layer = 0; layer < LAYERS; layer++) {
    model_kv_rows(layer, row_request, row_token, rows, k_new, v_new);
    flashcpu_tensor tk = flashcpu_tensor_bshd(k_new, FLASHCPU_DTYPE_F32, 1,
                                              rows, KV_HEADS, HEAD_DIM);
    flashcpu_tensor tv = flashcpu_tensor_bshd(v_new, FLASHCPU_DTYPE_F32, 1,
                                              rows, KV_HEADS, HEAD_DIM);
    status = flashcpu_kv_append(ctx, &tk, &tv, slot_mapping, &cache[layer]);
    if (status != FLASHCPU_OK) return failed(ctx, "kv_append", status);
  }

  /* ---- The step. Pages for the new tokens, then the ragged batch: packed
   * rows per request (cu_seqlens_q), keys per request (cached + new), the
   * block table, the new rows' slots and the verify request's tree. */
  int32_t cu_seqlens_q[REQUESTS + 1] = {0};
  int32_t seq_lens_kv[REQUESTS];
  int32_t block_table[REQUESTS][MAX_PAGES];
  uint64_t tree_bits[MAX_ROWS]; /* one 64-bit word per packed row */
  int32_t tree_num_keys[REQUESTS];
  memset(block_table, 0, sizeof block_table);
  memset(tree_bits, 0, sizeof tree_bits);
  rows = 0;
  for (int r = 0; r < REQUESTS; r++) {
    request *req = &requests[r];
    const int keys = req->cached + req->new_rows;
    if (reserve(req, &pool, keys) != 0) return 1;
    for (int i = 0; i < req->new_rows; i++, rows++) {
      row_request[rows] = r;
      row_token[rows] = req->cached + i;
      slot_mapping[rows] = slot_of(req, req->cached + i);
      if (req->kind == VERIFY)
        for (int draft = 0; draft < req->new_rows; draft++)
          if (draft_sees(i, draft)) tree_bits[rows] |= 1ull << draft;
    }
    cu_seqlens_q[r + 1] = (int32_t)rows;
    seq_lens_kv[r] = (int32_t)keys;
    memcpy(block_table[r], req->pages,
           (size_t)req->num_pages * sizeof(int32_t));
    tree_num_keys[r] = req->kind == VERIFY ? req->new_rows : 0;
  }
  const int tokens = rows;

  flashcpu_batch batch;
  flashcpu_batch_init(&batch);
  batch.num_requests = REQUESTS;
  batch.cu_seqlens_q = cu_seqlens_q;
  batch.seq_lens_kv = seq_lens_kv;
  batch.block_table = &block_table[0][0];
  batch.block_table_stride = MAX_PAGES;
  /* The verify request's tree over the packed rows: up to 64 draft keys,
   * one word a row. */
  const flashcpu_tree_mask tree = {tree_bits, tokens, 64, 1, 0};
  batch.tree_mask = &tree;
  batch.tree_num_keys = tree_num_keys;
  /* One plan for the step: it checks and copies the batch, and serves
   * every layer. */
  flashcpu_plan *plan = NULL;
  status = flashcpu_plan_create(ctx, &batch, Q_HEADS, FLASHCPU_DTYPE_F32,
                                FLASHCPU_DTYPE_F32, &cache[0], &plan);
  if (status != FLASHCPU_OK) return failed(ctx, "plan_create", status);
  char description[512];
  flashcpu_plan_describe(plan, description, sizeof description);
  printf("%s", description);

  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.flags = FLASHCPU_FLAG_CAUSAL; /* per request, bottom-right */

  double worst = 0.0;
  for (int layer = 0; layer < LAYERS; layer++) {
    /* This layer's new K/V rows into their pages, then attention over the
     * cached and new tokens. */
    model_kv_rows(layer, row_request, row_token, tokens, k_new, v_new);
    flashcpu_tensor tk = flashcpu_tensor_bshd(k_new, FLASHCPU_DTYPE_F32, 1,
                                              tokens, KV_HEADS, HEAD_DIM);
    flashcpu_tensor tv = flashcpu_tensor_bshd(v_new, FLASHCPU_DTYPE_F32, 1,
                                              tokens, KV_HEADS, HEAD_DIM);
    status = flashcpu_kv_append(ctx, &tk, &tv, slot_mapping, &cache[layer]);
    if (status != FLASHCPU_OK) return failed(ctx, "kv_append", status);

    for (int t = 0; t < tokens; t++)
      for (int h = 0; h < Q_HEADS; h++)
        for (int d = 0; d < HEAD_DIM; d++)
          q[((size_t)t * Q_HEADS + (size_t)h) * HEAD_DIM + (size_t)d] =
              model_value(0, layer, row_request[t], row_token[t], h, d);
    flashcpu_tensor tq = flashcpu_tensor_bshd(q, FLASHCPU_DTYPE_F32, 1, tokens,
                                              Q_HEADS, HEAD_DIM);
    flashcpu_tensor to = flashcpu_tensor_bshd(out, FLASHCPU_DTYPE_F32, 1,
                                              tokens, Q_HEADS, HEAD_DIM);
    status = flashcpu_attention_paged(ctx, plan, &tq, &cache[layer], &to, lse,
                                      &params);
    if (status != FLASHCPU_OK) return failed(ctx, "attention_paged", status);

    /* Every row of every request, every head; lse is [Q_HEADS, tokens]. */
    for (int r = 0; r < REQUESTS; r++)
      for (int i = 0; i < requests[r].new_rows; i++)
        for (int h = 0; h < Q_HEADS; h++) {
          const int t = cu_seqlens_q[r] + i;
          const double error =
              check_row(layer, r, &requests[r], h, i,
                        out + ((size_t)t * Q_HEADS + (size_t)h) * HEAD_DIM,
                        lse[h * tokens + t]);
          if (!(error <= worst)) worst = error;
        }
  }
  flashcpu_plan_destroy(plan);
  printf("step: %d requests, %d query rows, %d layers, pages of %d tokens; "
         "largest difference from a float64 softmax: %.3g\n",
         REQUESTS, tokens, LAYERS, PAGE_SIZE, worst);

  /* After the step: the new tokens count as cached; the first decode
   * request ended, and its pages go back to the pool for the next step.
   * (A verify request would keep its accepted drafts and drop the rest by
   * lowering its length.) */
  for (int r = 0; r < REQUESTS; r++) requests[r].cached += requests[r].new_rows;
  for (int p = 0; p < requests[0].num_pages; p++)
    page_free(&pool, requests[0].pages[p]);
  requests[0].num_pages = 0;

  for (int layer = 0; layer < LAYERS; layer++) {
    free(k_pool[layer]);
    free(v_pool[layer]);
  }
  flashcpu_context_destroy(ctx);
  /* float32 accumulation over at most 101 keys: far below 1e-4. */
  if (!(worst <= 1e-4)) {
    fprintf(stderr, "mismatch: %.3g\n", worst);
    return 1;
  }
  printf("ok\n");
  return 0;
}
