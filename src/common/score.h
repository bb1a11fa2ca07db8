/* A raw score (q.k times scale) finished the way every kernel must: softcap,
 * then ALiBi and the additive mask, into the log2 domain. An additive -inf
 * hides the key even when the score is NaN. Shared by the scalar paths of every
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

/* What finishing one row's scores needs: its additive mask row (NULL:
 * none), its ALiBi slope (0: none) and position. */
typedef struct fc_row_finish {
  const float *mask_row;
  float slope;
  int64_t position;
} fc_row_finish;

static inline fc_row_finish fc_row_finish_for(const fc_problem *p, int64_t b,
                                              int64_t head, int64_t row,
                                              int64_t kv_length) {
  fc_row_finish f;
  f.mask_row = NULL;
  if (p->additive)
    f.mask_row = p->additive->data +
                 fc_problem_batch_id(p, b) * p->additive->strides[0] +
                 head * p->additive->strides[1] +
                 (fc_problem_q_start(p, b) + row) * p->additive->strides[2];
  f.slope =
      p->alibi
          ? p->alibi[fc_problem_batch_id(p, b) * p->alibi_batch_stride + head]
          : 0.0f;
  f.position = fc_problem_position(p, b, kv_length, row);
  return f;
}

/* ALiBi's bias -slope * |position - key| (FlashAttention's; the distance
 * is exact in f32 below 2^24 keys). */
static inline float fc_alibi_bias(float slope, int64_t position, int64_t key) {
  const int64_t distance = position > key ? position - key : key - position;
  return -slope * (float)distance;
}

/* A raw score finished: softcap, ALiBi and the additive mask, into the log2
 * domain, saturated. */
static inline float fc_finish_score(const fc_problem *p, float score,
                                    const fc_row_finish *row, int64_t key) {
  float mask =
      row->mask_row ? row->mask_row[key * p->additive->strides[3]] : 0.0f;
  if (mask == -INFINITY) return -INFINITY;
  if (p->softcap > 0.0f) score = p->softcap * tanhf(score / p->softcap);
  if (row->slope != 0.0f)
    score += fc_alibi_bias(row->slope, row->position, key);
  return fc_saturate((score + mask) * FC_LOG2E_F);
}

#endif
