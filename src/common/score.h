/* A raw score (q.k times scale) finished the way every kernel must: softcap,
 * then the additive mask, into the log2 domain. An additive -inf hides the
 * key even when the score is NaN. Shared by the scalar paths of every
 * kernel so that they agree on the order of these steps. */
#ifndef FLASHCPU_COMMON_SCORE_H
#define FLASHCPU_COMMON_SCORE_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "common/math_constants.h"
#include "common/problem.h"

/* A score clamped to [-FLT_MAX, FLT_MAX]; NaN stays NaN. Every kernel
 * saturates its scores once they leave the dot product and again after the
 * log2(e) product, so a finite score or mask beyond FLT_MAX * ln 2 stays
 * finite (a -FLT_MAX mask on every key gives the uniform softmax, not an
 * empty row). The cost is two min/max per score, not per FMA. */
static inline float fc_saturate(float x) {
  return x > FLT_MAX ? FLT_MAX : x < -FLT_MAX ? -FLT_MAX : x;
}

/* mask_row: the additive mask's row for (batch, head, query row), or NULL. */
static inline float fc_finish_score(const fc_problem *p, float score,
                                    const float *mask_row, int64_t key) {
  float mask = mask_row ? mask_row[key * p->additive->strides[3]] : 0.0f;
  if (mask == -INFINITY) return -INFINITY;
  if (p->softcap > 0.0f) score = p->softcap * tanhf(score / p->softcap);
  return fc_saturate((score + mask) * FC_LOG2E_F);
}

#endif
