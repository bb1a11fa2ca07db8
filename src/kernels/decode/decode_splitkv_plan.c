/* The split plan of split-KV decode (portable: the dispatcher reads it). */
#include "kernels/decode/decode_splitkv.h"

enum {
  MIN_SPLIT_KEYS = 256, /* below this a split's fixed costs show */
  MAX_SPLITS = 64,      /* per (batch, kv head): enough tiles for many cores */
  KEY_ALIGN = FC_SPLITKV_KEY_BLOCK
};
/* Partial states of one call stay within this many floats (256 MiB). */
#define MAX_WORKSPACE_FLOATS (INT64_C(64) << 20)

fc_splitkv_plan fc_splitkv_make_plan(const fc_problem *p) {
  fc_splitkv_plan plan;
  plan.slots = p->q_len * p->group;
  int64_t rows = 0, longest = 0;
  for (int64_t b = 0; b < p->batch; b++) {
    const int64_t kv_length = fc_problem_kv_length(p, b);
    rows += fc_problem_q_len(p, b);
    if (kv_length > longest) longest = kv_length;
  }
  const int64_t records_per_split =
      rows * p->group * p->kv_heads * (p->v_head_dim + 2);
  int64_t max_splits =
      records_per_split > 0 ? MAX_WORKSPACE_FLOATS / records_per_split : 1;
  if (max_splits > MAX_SPLITS) max_splits = MAX_SPLITS;
  if (max_splits < 1) max_splits = 1;
  int64_t keys = (longest + max_splits - 1) / max_splits;
  keys = (keys + KEY_ALIGN - 1) / KEY_ALIGN * KEY_ALIGN;
  plan.split_keys = keys > MIN_SPLIT_KEYS ? keys : MIN_SPLIT_KEYS;
  plan.splits = fc_splitkv_splits_of(&plan, longest);
  return plan;
}
