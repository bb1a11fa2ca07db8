// One ggml flash-attention op built as ggml lays its tensors out (llama.cpp's
// token-major K/V cache with spare rows, q a permuted view, an f16 mask
// with -inf, sinks, ALiBi, softcap), run through src/ggml's mapping and
// flashcpu_attention, and checked against the float64 oracle.
//
// The expected result is built without the mapping: the test's own copies
// of q, K and V as contiguous f32 (every stored value is exact in f32,
// q8_0's d * c too) and a full [B, Hq, L, S] f32 additive mask holding
// slope(h) * mask value from ggml's broadcast rule (plane h % Hm, batch
// b % Bm), handed to the oracle and the naive float32 implementations of
// the tolerance rule.
#ifndef FLASHCPU_TESTS_GGML_CASE_H
#define FLASHCPU_TESTS_GGML_CASE_H

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ggml/ggml_mapping.h"

namespace fctest {

enum class MaskFill {
  kRandom, // values in [-1, 1], a fraction -inf in runs, some rows hidden
  kCausal, // row i sees the first (keys - rows + 1 + i) keys
  kPrefix, // every row sees the first `visible` keys
};

struct GgmlCase {
  int64_t head_dim = 64, v_head_dim = 64, rows = 3, keys = 77;
  int64_t q_heads = 8, kv_heads = 2, batch = 1;
  int32_t k_type = FCG_TYPE_F16, v_type = FCG_TYPE_F16;
  // K/V cache rows per (batch) beyond `keys`, holding NaN.
  int64_t spare_rows = 19;
  // llama.cpp's layouts: K/V [token][kv head][D] with the heads of a token
  // together, q a view of [token][head][D]; else ggml's contiguous
  // [batch][head][token][D].
  bool token_major = true;
  bool mask = true;
  MaskFill fill = MaskFill::kRandom;
  int64_t visible = 40;                     // kPrefix
  int64_t mask_heads = 1, mask_batches = 1; // planes Hm, Bm
  int64_t mask_spare_rows = 0, mask_spare_keys = 0;
  bool sinks = false;
  float max_bias = 0.0f, softcap = 0.0f, scale = 0.0f; // scale 0: 1/sqrt(D)
  size_t copy_budget = size_t(64) << 20;
  uint64_t seed = 1;

  std::string Describe() const;
};

// What a run did, for tests of the plan.
struct GgmlRun {
  fcg_plan plan{};
  int calls = 0;
};

// Builds the case, checks that fcg_supports accepts it, runs it on the
// shared context and checks every output element against the oracle and
// the K/V bytes unchanged.
testing::AssertionResult RunGgmlCase(const GgmlCase &c, GgmlRun *run = nullptr);

} // namespace fctest

#endif // FLASHCPU_TESTS_GGML_CASE_H
