// Inputs whose attention output is known exactly, independent of rounding:
//  - Q = 0: every visible key scores 0, so a row's output is the plain mean
//    of its visible V rows;
//  - "ranked keys": key j scores sign * kGap * j (plus a negligible rest),
//    so consecutive keys differ by far more than 110 and float32 exp
//    underflows to exactly 0 for every key but the best visible one: the
//    output is exactly that key's V row. With sign +1 the winner is the
//    newest visible key, with -1 the oldest: the two edges of the range.
// V values are m/64 with |m| <= 255: exact in f32, f16 and bf16 alike, so
// the expected rows need no rounding.
#ifndef FLASHCPU_TESTS_STRUCTURAL_INPUTS_H
#define FLASHCPU_TESTS_STRUCTURAL_INPUTS_H

#include <cstdint>

#include "attention_case.h"
#include "test_tensor.h"

namespace fctest {

// The scale to pass with RankKeys: consecutive keys 200 apart in score.
inline constexpr float kRankScale = 200.0f;

// +1 or -1 for (batch, head, row): mixes both edges within every tile.
inline int RankSign(int64_t b, int64_t h, int64_t i) {
  return ((b + h + i) % 2 == 0) ? 1 : -1;
}

// V values exact in every dtype, distinct across (batch, key, kv head, d).
inline void SetExactValues(AttentionCase &c, uint64_t seed) {
  Rng rng(seed);
  TestTensor &v = c.v();
  for (int64_t b = 0; b < v.dims()[0]; b++)
    for (int64_t j = 0; j < c.kv_length_of(b); j++)
      for (int64_t h = 0; h < v.dims()[2]; h++)
        for (int64_t d = 0; d < v.dims()[3]; d++) {
          int64_t m = 1 + rng.Below(255);
          v.Set(b, j, h, d, (rng.Chance(0.5) ? m : -m) / 64.0);
        }
}

inline void SetZeroQueries(AttentionCase &c) {
  TestTensor &q = c.q();
  for (int64_t b = 0; b < q.dims()[0]; b++)
    for (int64_t i = 0; i < q.dims()[1]; i++)
      for (int64_t h = 0; h < q.dims()[2]; h++)
        for (int64_t d = 0; d < q.dims()[3]; d++) q.Set(b, i, h, d, 0.0);
}

// Needs .scale(kRankScale) and kv lengths <= 256 (exact as bf16 integers).
inline void RankKeys(AttentionCase &c) {
  TestTensor &q = c.q(), &k = c.k();
  for (int64_t b = 0; b < q.dims()[0]; b++) {
    for (int64_t i = 0; i < q.dims()[1]; i++)
      for (int64_t h = 0; h < q.dims()[2]; h++) {
        q.Set(b, i, h, 0, RankSign(b, h, i));
        // The rest contributes at most 200 * D / 2^20: far below the gap.
        for (int64_t d = 1; d < q.dims()[3]; d++) q.Set(b, i, h, d, 1.0 / 1024);
      }
    for (int64_t j = 0; j < c.kv_length_of(b); j++)
      for (int64_t h = 0; h < k.dims()[2]; h++) {
        k.Set(b, j, h, 0, static_cast<double>(j));
        for (int64_t d = 1; d < k.dims()[3]; d++)
          k.Set(b, j, h, d, (d % 2 ? 1.0 : -1.0) / 1024);
      }
  }
}

} // namespace fctest

#endif // FLASHCPU_TESTS_STRUCTURAL_INPUTS_H
