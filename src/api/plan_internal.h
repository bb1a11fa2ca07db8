/* The plan behind the opaque flashcpu_plan handle: one step's lengths,
 * block table and tree masks, validated and copied, its requests split by
 * kernel family, each family's kernel chosen and planned once for every
 * layer of the step. */
#ifndef FLASHCPU_API_PLAN_INTERNAL_H
#define FLASHCPU_API_PLAN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/kernel_plan.h"
#include "kernels/registry.h"

/* The requests one kernel family runs, as the batches of one problem. */
typedef struct fc_plan_part {
  fc_kernel_family family;
  int64_t count;              /* requests */
  int64_t max_rows, max_keys; /* the problem's q_len and kv capacity */
  int64_t rows, keys;         /* totals, for describe */
  bool has_trees;
  /* Per request of the part: rows, first packed row, keys, start of its
   * pages in the plan's copy, tree keys (0: none), index in the batch. */
  int64_t *q_lens, *q_starts, *kv_lengths, *page_rows, *tree_keys, *batch_ids;
  int64_t *tile_starts; /* [count + 1]: room for a prefill kernel's */
} fc_plan_part;

enum { FC_PLAN_PARTS = 2 };

struct flashcpu_plan {
  uint64_t ctx_id; /* the context's id: its address may be reused */
  int64_t requests, tokens, q_heads;
  int64_t kv_heads, head_dim, v_head_dim, page_size, num_pages;
  flashcpu_dtype q_dtype, out_dtype;
  int64_t max_keys;        /* longest request, for mask extents */
  int32_t *pages;          /* the pages each request uses, in order */
  uint64_t *tree_bits;     /* [tokens][tree_row_stride] or NULL */
  flashcpu_tree_mask tree; /* over tree_bits, packed rows */
  fc_plan_part parts[FC_PLAN_PARTS];
  /* Per part with requests: its kernel, the problem it was planned for
   * (the cache's views as plan_create saw them; no call options) and the
   * kernel's plan. */
  const fc_attention_kernel *kernels[FC_PLAN_PARTS];
  fc_problem problems[FC_PLAN_PARTS];
  fc_kernel_plan kernel_plans[FC_PLAN_PARTS];
  size_t workspace_bytes; /* what the parts need together */
  void *workspace;        /* the caller's (flashcpu_plan_set_workspace), or
                             NULL: the context's */
};

#endif
