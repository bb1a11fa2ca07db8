#include "kernels/decode/splitkv_common.h"

#include <math.h>
#include <string.h>

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

void fc_splitkv_shared_init(fc_splitkv_shared *s, const fc_problem *p,
                            const fc_kernel_settings *settings) {
  memset(s, 0, sizeof *s);
  s->p = p;
  s->prefetch_l1 = settings->decode_prefetch_l1;
  s->plan = fc_splitkv_make_plan(p);
  s->scores_final = p->softcap == 0.0f && !p->additive;
  s->q_factor = s->scores_final ? p->scale * FC_LOG2E_F : p->scale;
  const int rows_differ = p->q_len > 1 && (p->causal || p->window_left >= 0 ||
                                           p->window_right >= 0);
  s->needs_finish = !s->scores_final || p->tree || rows_differ;
  s->heads_per_tile = 1;
  s->head_groups = p->kv_heads;
}

fc_splitkv_tile fc_splitkv_locate(const fc_splitkv_shared *s, int64_t tile) {
  const fc_problem *p = s->p;
  fc_splitkv_tile t;
  t.split = tile % s->plan.splits;
  t.group = tile / s->plan.splits;
  t.b = t.group / s->head_groups;
  t.h0 = t.group % s->head_groups * s->heads_per_tile;
  t.kv_length = fc_problem_kv_length(p, t.b);
  /* Keys of this split that some row of the tile sees. */
  const fc_key_range first = fc_row_key_range(p, t.kv_length, 0);
  const fc_key_range last = fc_row_key_range(p, t.kv_length, p->q_len - 1);
  t.begin = t.split * s->plan.split_keys;
  t.end = t.begin + s->plan.split_keys;
  if (t.end > t.kv_length) t.end = t.kv_length;
  if (t.begin < first.begin) t.begin = first.begin;
  if (t.end > last.end) t.end = last.end;
  return t;
}

float *fc_splitkv_record(const fc_splitkv_shared *s, int64_t bk,
                         int64_t split, int64_t slot) {
  return s->partials + ((bk * s->plan.splits + split) * s->plan.slots + slot) *
                           fc_state_floats(s->p->v_head_dim);
}

void fc_splitkv_finish(const fc_splitkv_shared *s, float *scores, int64_t b,
                       int64_t kv_head, int64_t slot, int64_t j0, int64_t n,
                       int64_t kv_length) {
  const fc_problem *p = s->p;
  if (slot >= s->plan.slots) { /* padding slot: sees nothing */
    for (int64_t j = 0; j < n; j++) scores[j] = -INFINITY;
    return;
  }
  const int64_t row = slot / p->group;
  const int64_t head = kv_head * p->group + slot % p->group;
  const fc_key_range range = fc_row_key_range(p, kv_length, row);
  const int64_t tree_begin = fc_tree_begin(p, kv_length);
  const float *mask_row =
      p->additive ? p->additive->data + b * p->additive->strides[0] +
                        head * p->additive->strides[1] +
                        row * p->additive->strides[2]
                  : NULL;
  for (int64_t j = 0; j < n; j++) {
    const int64_t key = j0 + j;
    if (key < range.begin || key >= range.end) {
      scores[j] = -INFINITY;
      continue;
    }
    if (!s->scores_final)
      scores[j] = fc_finish_score(p, scores[j], mask_row, key);
    if (key >= tree_begin && !fc_tree_allows(p, b, row, key, tree_begin))
      scores[j] = -INFINITY;
  }
}

void fc_splitkv_block_sweeps(const fc_splitkv_shared *s, int64_t b,
                             int64_t h0, int64_t key, int64_t end,
                             fc_prefetch_sweep *k_sweep,
                             fc_prefetch_sweep *v_sweep) {
  const fc_problem *p = s->p;
  const int64_t n =
      end - key < FC_SPLITKV_KEY_BLOCK ? end - key : FC_SPLITKV_KEY_BLOCK;
  const int any = key < end;
  const int64_t k_size = p->k.element_size, v_size = p->v.element_size;
  fc_sweep_init(k_sweep, any ? fc_view_row(&p->k, b, key, h0) : NULL, n,
                s->heads_per_tile, p->k.strides[1] * k_size,
                p->k.strides[2] * k_size, p->head_dim * k_size);
  fc_sweep_init(v_sweep, any ? fc_view_row(&p->v, b, key, h0) : NULL, n,
                s->heads_per_tile, p->v.strides[1] * v_size,
                p->v.strides[2] * v_size, p->v_head_dim * v_size);
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

/* Merges slot's splits of (batch, kv head) bk with the fixed tree and
 * writes its output row. */
static void merge_slot(const fc_splitkv_shared *s, int64_t bk, int64_t slot) {
  const fc_problem *p = s->p;
  const int64_t b = bk / p->kv_heads, kv_head = bk % p->kv_heads;
  float *first = fc_splitkv_record(s, bk, 0, slot);
  fc_merge_state_tree(first, s->plan.slots * fc_state_floats(p->v_head_dim),
                      s->plan.splits, p->v_head_dim);
  fc_write_output_row(p, b, slot / p->group,
                      kv_head * p->group + slot % p->group, first[FC_STATE_M],
                      first[FC_STATE_L], first + FC_STATE_O);
}

void fc_splitkv_tile_written(const fc_splitkv_shared *s,
                             const fc_splitkv_tile *t, int written) {
  if (!s->records_done || written <= 0) return;
  /* acq_rel makes every record written before an earlier increment
   * visible to the thread that completes the group. */
  const int before = atomic_fetch_add_explicit(
      &s->records_done[t->group], written, memory_order_acq_rel);
  if (before + written != s->records_per_group) return;
  for (int64_t h = 0; h < s->heads_per_tile; h++)
    for (int64_t slot = 0; slot < s->plan.slots; slot++)
      merge_slot(s, t->b * s->p->kv_heads + t->h0 + h, slot);
}

/* Tile = (batch, kv head, slot): one fixed tree over the splits. */
static void merge_tile(void *opaque, int64_t tile, const fc_team_view *team) {
  const fc_splitkv_shared *s = opaque;
  if (team->rank != 0) return;
  merge_slot(s, tile / s->plan.slots, tile % s->plan.slots);
}

flashcpu_status fc_splitkv_run(const fc_kernel_env *env, fc_splitkv_shared *s,
                               fc_tile_kernel tile, void *args,
                               fc_scratch_bytes_fn scratch) {
  fc_runtime *runtime = env->runtime;
  const fc_problem *p = s->p;
  /* Heads per tile: as many as keep TILES_PER_TEAM tiles for every team
   * (the largest divisor of kv_heads that does). How many a tile takes
   * never changes the math of a (kv head, split) state. */
  const int64_t wanted = TILES_PER_TEAM * runtime->plan.team_count;
  s->heads_per_tile = 1;
  for (int64_t g = p->kv_heads; g >= 1; g--) {
    if (p->kv_heads % g) continue;
    if (p->batch * s->plan.splits * (p->kv_heads / g) >= wanted || g == 1) {
      s->heads_per_tile = g;
      break;
    }
  }
  s->head_groups = p->kv_heads / s->heads_per_tile;

  const int64_t tiles = p->batch * s->head_groups * s->plan.splits;
  const size_t partial_bytes =
      (size_t)(p->batch * p->kv_heads * s->plan.splits) *
      (size_t)s->plan.slots * (size_t)fc_state_floats(p->v_head_dim) *
      sizeof(float);
  const int64_t groups = p->batch * s->head_groups;
  const int64_t records_per_group =
      s->plan.splits * s->heads_per_tile * s->plan.slots;
  const int merge_in_launch = s->plan.splits <= MERGE_IN_LAUNCH_MAX_SPLITS &&
                              records_per_group <= INT32_MAX;
  const size_t counters_offset = (partial_bytes + 63) & ~(size_t)63;
  const size_t workspace =
      merge_in_launch
          ? counters_offset + (size_t)groups * sizeof(fc_atomic_int)
          : partial_bytes;
  if (fc_runtime_reserve_call_workspace(runtime, workspace) != 0)
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory allocating %zu bytes for split-KV "
                          "partial states",
                          workspace);
  s->partials = runtime->call_workspace;
  s->records_done = NULL;
  if (merge_in_launch) {
    s->records_done =
        (fc_atomic_int *)((char *)runtime->call_workspace + counters_offset);
    s->records_per_group = (int)records_per_group;
    /* The launch publishes these to its threads. */
    for (int64_t g = 0; g < groups; g++) atomic_init(&s->records_done[g], 0);
  }
  flashcpu_status status =
      fc_kernel_reserve_scratch(env, scratch, args);
  if (status != FLASHCPU_OK) return status;

  fc_launch splits = {tile, args, tiles, false, NULL};
  fc_launch merge = {merge_tile, s, p->batch * p->kv_heads * s->plan.slots,
                     false, NULL};
  if (fc_runtime_launch(runtime, &splits) != 0 ||
      (!merge_in_launch && fc_runtime_launch(runtime, &merge) != 0))
    return fc_kernel_fail(env, FLASHCPU_ERROR_OUT_OF_MEMORY,
                          "out of memory launching split-KV decode");
  return FLASHCPU_OK;
}
