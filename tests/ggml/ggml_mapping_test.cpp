// ggml's flash attention through src/ggml's mapping and flashcpu_attention,
// against the float64 oracle: K/V types in llama.cpp's cache layout, GQA
// and MQA, masks of every form the plan takes (copied, prefix, causal),
// mask planes repeated over heads and batches, sinks, ALiBi from max_bias,
// softcap.
#include <gtest/gtest.h>

#include "ggml_case.h"

namespace fctest {
namespace {

TEST(GgmlMapping, KvTypesInTheirCacheLayout) {
  for (int32_t type :
       {FCG_TYPE_F32, FCG_TYPE_F16, FCG_TYPE_BF16, FCG_TYPE_Q8_0})
    for (bool token_major : {true, false}) {
      GgmlCase c;
      c.k_type = c.v_type = type;
      c.token_major = token_major;
      c.seed = static_cast<uint64_t>(type) * 2 + token_major;
      GgmlRun run;
      EXPECT_TRUE(RunGgmlCase(c, &run));
      EXPECT_EQ(run.plan.mask_kind, FCG_MASK_COPY);
    }
}

TEST(GgmlMapping, MixedKvTypesAndHeadSizes) {
  GgmlCase c;
  c.k_type = FCG_TYPE_Q8_0;
  c.v_type = FCG_TYPE_F16;
  c.head_dim = 128;
  c.v_head_dim = 40;
  EXPECT_TRUE(RunGgmlCase(c));
  c.k_type = FCG_TYPE_BF16;
  c.v_type = FCG_TYPE_Q8_0;
  c.head_dim = 72;
  c.v_head_dim = 96;
  EXPECT_TRUE(RunGgmlCase(c));
}

TEST(GgmlMapping, DecodeAndPrefillShapes) {
  for (int64_t rows : {1, 2, 17, 40}) {
    GgmlCase c;
    c.rows = rows;
    c.keys = 300;
    c.q_heads = 32;
    c.kv_heads = 8;
    c.head_dim = c.v_head_dim = 128;
    c.seed = static_cast<uint64_t>(rows);
    EXPECT_TRUE(RunGgmlCase(c));
  }
}

TEST(GgmlMapping, GroupedAndMultiQueryHeads) {
  for (int64_t kv_heads : {1, 2, 6, 12}) {
    GgmlCase c;
    c.q_heads = 12;
    c.kv_heads = kv_heads;
    c.seed = static_cast<uint64_t>(kv_heads);
    EXPECT_TRUE(RunGgmlCase(c));
  }
}

TEST(GgmlMapping, CausalMaskRunsAsCausalOverKeyLengths) {
  for (bool sinks : {false, true}) {
    GgmlCase c;
    c.fill = MaskFill::kCausal;
    c.rows = 9;
    c.keys = 50;
    c.sinks = sinks;
    GgmlRun run;
    EXPECT_TRUE(RunGgmlCase(c, &run));
    EXPECT_EQ(run.plan.mask_kind, FCG_MASK_CAUSAL);
    EXPECT_EQ(run.plan.copy_floats, 0u);
  }
}

TEST(GgmlMapping, PrefixMaskRunsOverKeyLengths) {
  // A decode step over a cache padded past its last token, and prefill rows
  // that all see the same keys.
  for (int64_t rows : {1, 5})
    for (int64_t visible : {0, 1, 33, 77}) {
      GgmlCase c;
      c.fill = MaskFill::kPrefix;
      c.rows = rows;
      c.visible = visible;
      c.sinks = visible == 0;
      c.seed = static_cast<uint64_t>(visible);
      GgmlRun run;
      EXPECT_TRUE(RunGgmlCase(c, &run));
      EXPECT_EQ(run.plan.mask_kind, FCG_MASK_PREFIX);
    }
}

TEST(GgmlMapping, PaddedMaskRowsAndKeysAreNotRead) {
  for (MaskFill fill : {MaskFill::kRandom, MaskFill::kCausal}) {
    GgmlCase c;
    c.fill = fill;
    c.rows = 6;
    c.mask_spare_rows = 58; // rows padded as older llama.cpp did
    c.mask_spare_keys = 5;
    EXPECT_TRUE(RunGgmlCase(c));
  }
}

TEST(GgmlMapping, MaskPlanesRepeatOverHeadsAndBatches) {
  GgmlCase c;
  c.batch = 3;
  c.q_heads = 8;
  c.kv_heads = 4;
  c.mask_heads = 4; // head h reads plane h % 4
  c.mask_batches = 3;
  EXPECT_TRUE(RunGgmlCase(c));
  c.mask_heads = 2;
  c.mask_batches = 1;
  EXPECT_TRUE(RunGgmlCase(c));
  c.fill = MaskFill::kCausal;
  c.mask_heads = 1;
  c.mask_batches = 3;
  GgmlRun run;
  EXPECT_TRUE(RunGgmlCase(c, &run));
  EXPECT_EQ(run.plan.mask_kind, FCG_MASK_CAUSAL);
}

TEST(GgmlMapping, AlibiFromMaxBias) {
  for (int64_t heads : {8, 12})
    for (float max_bias : {8.0f, 1.5f}) {
      GgmlCase c;
      c.q_heads = heads;
      c.kv_heads = heads / 4;
      c.max_bias = max_bias;
      c.sinks = true;
      c.seed = static_cast<uint64_t>(heads);
      GgmlRun run;
      EXPECT_TRUE(RunGgmlCase(c, &run));
      EXPECT_EQ(run.plan.heads_per_call, heads);
      EXPECT_EQ(run.plan.copy_floats,
                static_cast<size_t>(heads * c.rows * c.keys));
    }
}

TEST(GgmlMapping, AlibiCopyCutIntoCallsByTheBudget) {
  // Each head's copy is rows x keys floats; budgets of 1, 2, 3 heads' worth
  // (GQA groups of 4), and a budget below one head.
  for (size_t heads_fit : {0, 1, 2, 3, 5}) {
    GgmlCase c;
    c.q_heads = 16;
    c.kv_heads = 4;
    c.max_bias = 8.0f;
    c.copy_budget = heads_fit * static_cast<size_t>(c.rows * c.keys) * 4;
    GgmlRun run;
    EXPECT_TRUE(RunGgmlCase(c, &run));
    const int64_t expected[] = {1, 1, 2, 2, 4};
    size_t index = heads_fit == 5 ? 4 : heads_fit;
    EXPECT_EQ(run.plan.heads_per_call, expected[index]);
    EXPECT_EQ(run.calls, 16 / expected[index]);
  }
  GgmlCase mqa; // one kv head: calls take any divisor of the heads
  mqa.q_heads = 8;
  mqa.kv_heads = 1;
  mqa.max_bias = 8.0f;
  mqa.copy_budget = 3 * static_cast<size_t>(mqa.rows * mqa.keys) * 4;
  GgmlRun run;
  EXPECT_TRUE(RunGgmlCase(mqa, &run));
  EXPECT_EQ(run.plan.heads_per_call, 2);
}

TEST(GgmlMapping, AlibiLeavesZeroInfMasksAsKeyLengths) {
  GgmlCase c;
  c.fill = MaskFill::kCausal;
  c.max_bias = 8.0f;
  GgmlRun run;
  EXPECT_TRUE(RunGgmlCase(c, &run));
  EXPECT_EQ(run.plan.mask_kind, FCG_MASK_CAUSAL);
}

TEST(GgmlMapping, Softcap) {
  for (float cap : {10.0f, -10.0f, 0.5f}) {
    GgmlCase c;
    c.softcap = cap;
    c.scale = 0.7f;
    EXPECT_TRUE(RunGgmlCase(c));
  }
  GgmlCase both;
  both.softcap = 20.0f;
  both.max_bias = 8.0f;
  both.sinks = true;
  both.k_type = both.v_type = FCG_TYPE_Q8_0;
  EXPECT_TRUE(RunGgmlCase(both));
}

TEST(GgmlMapping, NoMask) {
  GgmlCase c;
  c.mask = false;
  c.sinks = true;
  GgmlRun run;
  EXPECT_TRUE(RunGgmlCase(c, &run));
  EXPECT_EQ(run.plan.mask_kind, FCG_MASK_NONE);
}

} // namespace
} // namespace fctest
