#include "kernels/decode/splitkv_common.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "common/dtype_convert.h"
#include "common/mask.h"
#include "common/score.h"
#include "kernels/decode/prefetch_sweep.h"
#include "kernels/merge/merge_states.h"

/* Tiles per team a launch aims for. */
enum { TILES_PER_TEAM = 2 };
/* At most this many splits per (batch, kv head): merged in the split
 * launch by the group's last writer (one thread merges heads_per_tile x
 * slots x splits states; with more splits the merge launch spreads them
 * better). Figures: docs/performance.md. */
enum { MERGE_IN_LAUNCH_MAX_SPLITS = 4 };

/* The score factor and finishing work of the call's options. */
static void bind_options(fc_splitkv_shared *s, const fc_problem *p) {
  s->p = p;
  s->scores_final = fc_problem_scores_final(p);
  s->q_factor = s->scores_final ? p->scale * FC_LOG2E_F : p->scale;
  const int rows_differ = p->q_len > 1 && (p->causal || p->window_left >= 0 ||
                                           p->window_right >= 0);
  s->needs_finish = !s->scores_final || p->tree || rows_differ;
}

/* A paged view whose pages hold at most 4 KiB. */
static int small_pages(const fc_view *view) {
  return view->pages &&
         view->page_size * view->strides[1] * view->element_size <= 4096;
}

void fc_splitkv_shared_init(fc_splitkv_shared *s, const fc_problem *p,
                            const fc_kernel_settings *settings) {
  memset(s, 0, sizeof *s);
  s->prefetch_l1 = settings->decode_prefetch_l1;
  s->touches_pages = small_pages(&p->k) || small_pages(&p->v);
  s->plan = fc_splitkv_make_plan(p);
  bind_options(s, p);
  s->heads_per_tile = 1;
  s->head_groups = p->kv_heads;
}

/* The batch whose range of a per-batch prefix array holds index. */
static int64_t batch_of(const int64_t *starts, int64_t batch, int64_t index) {
  int64_t low = 0, high = batch - 1;
  while (low < high) {
    const int64_t middle = (low + high + 1) / 2;
    if (starts[middle] <= index)
      low = middle;
    else
      high = middle - 1;
  }
  return low;
}

static int64_t splits_of_batch(const fc_splitkv_shared *s, int64_t b) {
  return fc_splitkv_splits_of(&s->plan, fc_problem_kv_length(s->p, b));
}

fc_splitkv_tile fc_splitkv_locate(const fc_splitkv_shared *s, int64_t tile) {
  const fc_problem *p = s->p;
  fc_splitkv_tile t;
  t.b = batch_of(s->tile_starts, p->batch, tile);
  const int64_t local = tile - s->tile_starts[t.b];
  const int64_t splits = splits_of_batch(s, t.b);
  t.split = local % splits;
  t.group = t.b * s->head_groups + local / splits;
  t.h0 = local / splits * s->heads_per_tile;
  t.kv_length = fc_problem_kv_length(p, t.b);
  t.slots = fc_splitkv_slots_of(s, t.b);
  const int64_t q_len = fc_problem_q_len(p, t.b);
  t.begin = t.end = 0;
  if (q_len == 0) return t;
  /* Keys of this split that some row of the tile sees. */
  const fc_key_range first = fc_row_key_range(p, t.b, t.kv_length, 0);
  const fc_key_range last = fc_row_key_range(p, t.b, t.kv_length, q_len - 1);
  t.begin = t.split * s->plan.split_keys;
  t.end = t.begin + s->plan.split_keys;
  if (t.end > t.kv_length) t.end = t.kv_length;
  if (t.begin < first.begin) t.begin = first.begin;
  if (t.end > last.end) t.end = last.end;
  return t;
}

float *fc_splitkv_record(const fc_splitkv_shared *s, int64_t b, int64_t kv_head,
                         int64_t split, int64_t slot) {
  const int64_t record =
      s->record_starts[b] +
      (kv_head * splits_of_batch(s, b) + split) * fc_splitkv_slots_of(s, b) +
      slot;
  return s->partials + record * fc_state_floats(s->p->v_head_dim);
}

void fc_splitkv_finish(const fc_splitkv_shared *s, float *scores, int64_t b,
                       int64_t kv_head, int64_t slot, int64_t j0, int64_t n,
                       int64_t kv_length) {
  const fc_problem *p = s->p;
  if (slot >= fc_splitkv_slots_of(s, b)) { /* padding slot: sees nothing */
    for (int64_t j = 0; j < n; j++) scores[j] = -INFINITY;
    return;
  }
  const int64_t row = slot / p->group;
  const int64_t head = kv_head * p->group + slot % p->group;
  const fc_key_range range = fc_row_key_range(p, b, kv_length, row);
  const int64_t tree_begin = fc_tree_begin(p, b, kv_length);
  const fc_row_finish finish = fc_row_finish_for(p, b, head, row, kv_length);
  for (int64_t j = 0; j < n; j++) {
    const int64_t key = j0 + j;
    if (key < range.begin || key >= range.end) {
      scores[j] = -INFINITY;
      continue;
    }
    if (!s->scores_final)
      scores[j] = fc_finish_score(p, scores[j], &finish, key);
    if (key >= tree_begin && !fc_tree_allows(p, b, row, key, tree_begin))
      scores[j] = -INFINITY;
  }
}

/* Rows of keys [key, key + n) of (b, head 0), stepping by the seq stride
 * and looking rows up again at each page boundary. */
static void head0_rows(const fc_view *view, int64_t b, int64_t key, int64_t n,
                       const char **rows) {
  if (n <= 0) return;
  const char *row = fc_view_row(view, b, key, 0);
  const int64_t step = view->strides[1] * view->element_size;
  int64_t run_end = fc_view_run_end(view, key);
  for (int64_t j = 0; j < n; j++, row += step) {
    if (key + j == run_end) {
      row = fc_view_row(view, b, key + j, 0);
      run_end = fc_view_run_end(view, key + j);
    }
    rows[j] = row;
  }
}

void fc_splitkv_block_rows_fill(const fc_splitkv_shared *s, int64_t b,
                                int64_t key, int64_t end,
                                fc_splitkv_block_rows *rows) {
  const int64_t n =
      end - key < FC_SPLITKV_KEY_BLOCK ? end - key : FC_SPLITKV_KEY_BLOCK;
  rows->key = key;
  rows->count = n > 0 ? n : 0;
  head0_rows(&s->p->k, b, key, n, rows->k);
  head0_rows(&s->p->v, b, key, n, rows->v);
}

/* The first line of each 4 KiB page of a row of `bytes` at row. */
static void touch_row(const char *row, int64_t bytes) {
  __builtin_prefetch(row, 0, 1);
  for (uintptr_t at = ((uintptr_t)row | 4095) + 1;
       at < (uintptr_t)row + (uintptr_t)bytes; at += 4096)
    __builtin_prefetch((const char *)at, 0, 1);
}

void fc_splitkv_touch_pages(const fc_splitkv_shared *s, int64_t b, int64_t key,
                            int64_t end, int64_t h0) {
  if (!s->touches_pages) return;
  const fc_problem *p = s->p;
  const int64_t last =
      end - key < FC_SPLITKV_KEY_BLOCK ? end : key + FC_SPLITKV_KEY_BLOCK;
  const int64_t k_bytes =
      s->heads_per_tile * p->k.strides[2] * p->k.element_size;
  const int64_t v_bytes =
      s->heads_per_tile * p->v.strides[2] * p->v.element_size;
  for (int64_t j = key; j < last; j++) {
    touch_row(fc_view_row(&p->k, b, j, h0), k_bytes);
    touch_row(fc_view_row(&p->v, b, j, h0), v_bytes);
  }
}

void fc_splitkv_touch_ahead(const fc_splitkv_shared *s,
                            const fc_splitkv_tile *t,
                            const fc_splitkv_tile *after, int64_t j0) {
  if (!s->touches_pages) return;
  const int64_t key = j0 + 2 * FC_SPLITKV_KEY_BLOCK;
  if (key < t->end) {
    fc_splitkv_touch_pages(s, t->b, key, t->end, t->h0);
    return;
  }
  if (!after) return;
  /* Blocks past t's last, counted into after's. */
  const int64_t blocks =
      (t->end - t->begin + FC_SPLITKV_KEY_BLOCK - 1) / FC_SPLITKV_KEY_BLOCK;
  const int64_t index = (j0 - t->begin) / FC_SPLITKV_KEY_BLOCK + 2 - blocks;
  const int64_t next = after->begin + index * FC_SPLITKV_KEY_BLOCK;
  if (next < after->end)
    fc_splitkv_touch_pages(s, after->b, next, after->end, after->h0);
}

void fc_splitkv_block_sweeps(const fc_splitkv_shared *s,
                             const fc_splitkv_block_rows *rows, int64_t h0,
                             fc_prefetch_sweep *k_sweep,
                             fc_prefetch_sweep *v_sweep) {
  const fc_problem *p = s->p;
  const int64_t n = rows->count;
  const int64_t k_size = p->k.element_size, v_size = p->v.element_size;
  const int64_t k_head = p->k.strides[2] * k_size,
                v_head = p->v.strides[2] * v_size;
  fc_sweep_init(k_sweep, n ? rows->k[0] + h0 * k_head : NULL, n,
                s->heads_per_tile, p->k.strides[1] * k_size, k_head,
                fc_view_row_bytes(&p->k, p->head_dim));
  fc_sweep_init(v_sweep, n ? rows->v[0] + h0 * v_head : NULL, n,
                s->heads_per_tile, p->v.strides[1] * v_size, v_head,
                fc_view_row_bytes(&p->v, p->v_head_dim));
  /* Pages break the fixed key step: the sweeps take the listed rows, at
   * the tile's first head. */
  if (p->k.pages) fc_sweep_use_rows(k_sweep, rows->k, h0 * k_head);
  if (p->v.pages) fc_sweep_use_rows(v_sweep, rows->v, h0 * v_head);
  k_sweep->into_l1 = v_sweep->into_l1 = s->prefetch_l1 != 0;
}

/* Both directions walk a row a pair at a time, with no division per
 * element: an integer divide per element of every record written showed
 * in a cached 1-thread decode (docs/performance.md). */
void fc_splitkv_to_pairs(float *row, int64_t padded, int64_t pair) {
  float natural[64];
  const int64_t half = pair / 2;
  for (int64_t d0 = 0; d0 < padded; d0 += pair) {
    memcpy(natural, row + d0, (size_t)pair * sizeof(float));
    for (int64_t k = 0; k < half; k++) {
      row[d0 + k] = natural[2 * k];
      row[d0 + half + k] = natural[2 * k + 1];
    }
  }
}

void fc_splitkv_write_state(float *record, float m, float l, const float *o,
                            int64_t dv, int64_t pair) {
  record[FC_STATE_M] = m;
  if (m == -INFINITY) return;
  record[FC_STATE_L] = l;
  float *out = record + FC_STATE_O;
  if (pair == 0) {
    memcpy(out, o, (size_t)dv * sizeof(float));
    return;
  }
  const int64_t half = pair / 2;
  int64_t d0 = 0;
  for (; d0 + pair <= dv; d0 += pair)
    for (int64_t k = 0; k < half; k++) {
      out[d0 + 2 * k] = o[d0 + k];
      out[d0 + 2 * k + 1] = o[d0 + half + k];
    }
  for (int64_t d = d0; d < dv; d++) /* a partial last pair */
    out[d] = o[d0 + fc_splitkv_paired_index(d - d0, pair)];
}

/* o[0..dv) in pair order, a pair at a time in natural order through
 * fc_store_row (where the ISA gave no stores of its own). */
static void store_paired(const float *o, int64_t pair, float factor, int64_t dv,
                         const fc_view *out_view, char *out) {
  if (pair == 0) {
    fc_store_row(o, factor, dv, out_view->dtype, out);
    return;
  }
  float natural[64];
  for (int64_t d0 = 0; d0 < dv; d0 += pair) {
    const int64_t n = dv - d0 < pair ? dv - d0 : pair;
    for (int64_t k = 0; k < n; k++)
      natural[k] = o[d0 + fc_splitkv_paired_index(k, pair)];
    fc_store_row(natural, factor, n, out_view->dtype,
                 out + d0 * out_view->element_size);
  }
}

void fc_splitkv_write_row(const fc_splitkv_shared *s, int64_t b,
                          int64_t kv_head, int64_t slot, float m, float l,
                          const float *o, int64_t pair) {
  const fc_problem *p = s->p;
  const int64_t row = slot / p->group;
  const int64_t head = kv_head * p->group + slot % p->group;
  char *out = (char *)fc_view_row(&p->out, b, row, head);
  float factor;
  if (!fc_output_factor(p, b, row, head, m, l, &factor))
    memset(out, 0, (size_t)(p->v_head_dim * p->out.element_size));
  else if (s->store_row)
    s->store_row(o, pair, factor, p->v_head_dim, p->out.dtype, out);
  else
    store_paired(o, pair, factor, p->v_head_dim, &p->out, out);
}

/* Merges slot's splits of (batch b, kv head) with the fixed tree and
 * writes its output row. */
static void merge_slot(const fc_splitkv_shared *s, int64_t b, int64_t kv_head,
                       int64_t slot) {
  const fc_problem *p = s->p;
  float *first = fc_splitkv_record(s, b, kv_head, 0, slot);
  fc_merge_state_tree(
      first, fc_splitkv_slots_of(s, b) * fc_state_floats(p->v_head_dim),
      splits_of_batch(s, b), p->v_head_dim);
  fc_splitkv_write_row(s, b, kv_head, slot, first[FC_STATE_M],
                       first[FC_STATE_L], first + FC_STATE_O, 0);
}

/* Records a (batch, head group) gets: splits x heads x slots. */
static int64_t records_of_group(const fc_splitkv_shared *s, int64_t b) {
  return splits_of_batch(s, b) * s->heads_per_tile * fc_splitkv_slots_of(s, b);
}

void fc_splitkv_tile_written(const fc_splitkv_shared *s,
                             const fc_splitkv_tile *t, int written) {
  if (!s->records_done || written <= 0) return;
  /* acq_rel makes every record written before an earlier increment
   * visible to the thread that completes the group. */
  const int before = atomic_fetch_add_explicit(&s->records_done[t->group],
                                               written, memory_order_acq_rel);
  if (before + written != records_of_group(s, t->b)) return;
  for (int64_t h = 0; h < s->heads_per_tile; h++)
    for (int64_t slot = 0; slot < t->slots; slot++)
      merge_slot(s, t->b, t->h0 + h, slot);
}

/* Tile = (batch, kv head, slot): one fixed tree over the splits. */
static void merge_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const fc_splitkv_shared *s = opaque;
  if (team->rank != 0) return;
  const int64_t b = batch_of(s->merge_starts, s->p->batch, tile);
  const int64_t local = tile - s->merge_starts[b];
  const int64_t slots = fc_splitkv_slots_of(s, b);
  merge_slot(s, b, local / slots, local % slots);
}

/* Bytes from offset up to the next 64-byte line. */
static size_t line_up(size_t offset) { return (offset + 63) & ~(size_t)63; }

/* Where every split-KV kernel's arguments keep the problem: after the
 * shared part, as in fc_splitkv_args. */
static const fc_problem **args_problem(fc_kernel_plan *plan) {
  return (const fc_problem **)(void *)(plan->state +
                                       offsetof(fc_splitkv_args, p));
}

/* Points the partial states and per-batch starts into the workspace,
 * fills the starts, zeroes the merge counters, and sets the launches. */
static void bind(fc_kernel_plan *plan, const fc_problem *p, void *workspace) {
  fc_splitkv_shared *s = (fc_splitkv_shared *)(void *)plan->state;
  bind_options(s, p);
  *args_problem(plan) = p;
  char *base = workspace;
  s->partials = (float *)(void *)base;
  s->tile_starts = (int64_t *)(void *)(base + s->starts_offset);
  s->record_starts = s->tile_starts + p->batch + 1;
  s->merge_starts = s->record_starts + p->batch + 1;
  s->tile_starts[0] = s->record_starts[0] = s->merge_starts[0] = 0;
  for (int64_t b = 0; b < p->batch; b++) {
    const int64_t splits = splits_of_batch(s, b);
    const int64_t slots = fc_splitkv_slots_of(s, b);
    s->tile_starts[b + 1] = s->tile_starts[b] + splits * s->head_groups;
    s->record_starts[b + 1] =
        s->record_starts[b] + p->kv_heads * splits * slots;
    s->merge_starts[b + 1] =
        s->merge_starts[b] +
        (fc_splitkv_writes_rows(s, b) ? 0 : p->kv_heads * slots);
  }
  s->records_done = NULL;
  if (s->merge_in_launch) {
    s->records_done = (fc_atomic_int *)(void *)(base + s->counters_offset);
    /* The launch publishes these to its threads. */
    for (int64_t g = 0; g < s->groups; g++) atomic_init(&s->records_done[g], 0);
  }
  plan->main = (fc_launch){s->tile, plan->state, s->tiles, false, NULL};
  plan->after = (fc_launch){merge_tile, s, s->merge_in_launch ? 0 : s->merges,
                            false, NULL};
}

flashcpu_status fc_splitkv_plan_args(const fc_kernel_env *env,
                                     fc_kernel_plan *plan, const void *args,
                                     size_t size, fc_tile_kernel tile,
                                     fc_scratch_bytes_fn scratch) {
  const flashcpu_status status = fc_kernel_plan_start(env, plan, args, size);
  if (status != FLASHCPU_OK) return status;
  fc_splitkv_shared *s = (fc_splitkv_shared *)(void *)plan->state;
  const fc_problem *p = s->p;
  int64_t total_splits = 0, total_records = 0, total_merges = 0;
  int64_t most_splits = 1, most_group_records = 0;
  for (int64_t b = 0; b < p->batch; b++) {
    const int64_t splits = splits_of_batch(s, b);
    const int64_t slots = fc_splitkv_slots_of(s, b);
    total_splits += splits;
    total_records += p->kv_heads * splits * slots;
    if (!fc_splitkv_writes_rows(s, b)) total_merges += p->kv_heads * slots;
    if (splits > most_splits) most_splits = splits;
    if (splits * slots * p->kv_heads > most_group_records)
      most_group_records = splits * slots * p->kv_heads;
  }
  /* Heads per tile: as many as keep TILES_PER_TEAM tiles for every team
   * (the largest divisor of kv_heads that does). How many a tile takes
   * never changes the math of a (kv head, split) state. */
  const int64_t wanted = TILES_PER_TEAM * env->runtime->plan.team_count;
  s->heads_per_tile = 1;
  for (int64_t g = p->kv_heads; g >= 1; g--) {
    if (p->kv_heads % g) continue;
    if (total_splits * (p->kv_heads / g) >= wanted || g == 1) {
      s->heads_per_tile = g;
      break;
    }
  }
  s->head_groups = p->kv_heads / s->heads_per_tile;
  s->tile = tile;
  s->tiles = total_splits * s->head_groups;
  s->merges = total_merges;
  s->groups = p->batch * s->head_groups;
  s->merge_in_launch = most_splits <= MERGE_IN_LAUNCH_MAX_SPLITS &&
                       most_group_records <= INT32_MAX;
  /* The workspace: records, then per-batch starts, then the counters. */
  const size_t record_bytes = (size_t)total_records *
                              (size_t)fc_state_floats(p->v_head_dim) *
                              sizeof(float);
  s->starts_offset = line_up(record_bytes);
  const size_t starts_bytes = 3 * (size_t)(p->batch + 1) * sizeof(int64_t);
  s->counters_offset = line_up(s->starts_offset + starts_bytes);
  plan->workspace_bytes =
      s->counters_offset +
      (s->merge_in_launch ? (size_t)s->groups * sizeof(fc_atomic_int) : 0);
  plan->scratch_bytes =
      fc_kernel_scratch_bytes(env->runtime, scratch, plan->state);
  plan->tile_count = s->tiles;
  plan->bind = bind;
  return FLASHCPU_OK;
}
