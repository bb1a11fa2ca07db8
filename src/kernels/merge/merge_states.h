/* Merging partial attention states: the log-sum-exp merge that split-KV
 * decode uses for its tree and flashcpu_merge_states for engines' partial
 * results. Portable C (baseline TU), so every caller runs the same code.
 *
 * A state is a record of 2 + dv floats: running max m (log2 domain), sum l
 * and unnormalised output o[dv], i.e. out = o / l, lse = (m + log2 l) ln 2.
 * m == -inf is an empty state (no key seen): it contributes nothing and its
 * l and o are never read. */
#ifndef FLASHCPU_KERNELS_MERGE_MERGE_STATES_H
#define FLASHCPU_KERNELS_MERGE_MERGE_STATES_H

#include <stdint.h>

#include "common/problem.h"

enum { FC_STATE_M = 0, FC_STATE_L = 1, FC_STATE_O = 2 };

/* Floats of one state record. */
static inline int64_t fc_state_floats(int64_t dv) { return dv + FC_STATE_O; }

/* Folds state `from` into `into`. NaN in either m propagates to every
 * element of the result. */
void fc_merge_state(float *into, const float *from, int64_t dv);

/* Merges count records (record i at first + i * stride floats) into record
 * 0 in a pairwise tree of fixed shape: at level k, record i + 2^k is folded
 * into record i for every i that is a multiple of 2^(k+1). The result
 * depends on count only, never on who runs it. */
void fc_merge_state_tree(float *first, int64_t stride, int64_t count,
                         int64_t dv);

/* One flashcpu_merge_states call after checking: count states of
 * [batch, q_len, heads, dv] rows and their lse arrays. */
typedef struct fc_merge_problem {
  int64_t count, batch, q_len, heads, dv;
  const fc_view *states; /* count views */
  const float *const *state_lse;
  fc_view out;
  float *lse; /* or NULL */
} fc_merge_problem;

#endif
