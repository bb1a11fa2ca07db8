// Split-KV decode's scores from bf16 q and K: by AVX512-BF16 dot products
// (FLASHCPU_DECODE_BF16_DOT=1; the default on AMD CPUs that have them) and
// by widening K to f32 (=0; the default elsewhere), both against the
// float64 oracle.
// The variable is read when a context fills its kernel table, so each test
// makes its own context with it set and unsets it again.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16, F32 = FLASHCPU_DTYPE_F32;

// Param: the value of FLASHCPU_DECODE_BF16_DOT ("1": dot products, "0": off).
class DecodeBf16Scores : public testing::TestWithParam<const char *> {
 protected:
  void SetUp() override {
    dot_ = std::string(GetParam()) == "1";
    if (dot_ && !CpuHasFeature("avx512_bf16")) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
    setenv("FLASHCPU_DECODE_BF16_DOT", GetParam(), 1);
    ASSERT_EQ(flashcpu_context_create(nullptr, &ctx_), FLASHCPU_OK);
    unsetenv("FLASHCPU_DECODE_BF16_DOT");
    if (ContextDescription(ctx_).find("split KV: fc_attention_decode_splitkv__avx512") ==
        std::string::npos)
      GTEST_SKIP() << "no AVX-512 split-KV kernel here";
  }
  void TearDown() override { flashcpu_context_destroy(ctx_); }
  bool dot_ = false;
  flashcpu_context *ctx_ = nullptr;
};

TEST_P(DecodeBf16Scores, DescribeNamesTheScoresFunctionExactlyWhenOn) {
  const bool named =
      ContextDescription(ctx_).find("split KV scores, bf16 q and k: fc_bf16_splitkv_scores__avx512bf16") !=
      std::string::npos;
  EXPECT_EQ(named, dot_) << ContextDescription(ctx_);
}

TEST_P(DecodeBf16Scores, Llama3ShapeWithPartialBlocksAndSplits) {
  // 777 keys: three splits of 256 and a 9-key tail block.
  AttentionCase c;
  c.q_len(1).kv_len(777).heads(32, 8).head_dim(128).dtypes(BF16, BF16, BF16).seed(21).Test(ctx_);
}

TEST_P(DecodeBf16Scores, EveryHeadDimIncludingTails) {
  for (int64_t d : {64, 80, 96, 256, 34, 16}) {
    AttentionCase c;
    c.q_len(1).kv_len(300).heads(8, 2).head_dim(d).dtypes(BF16, BF16, F32).seed(22 + (int)d).Test(ctx_);
  }
}

TEST_P(DecodeBf16Scores, BatchWithMixedLengthsAndEmptyOne) {
  AttentionCase c;
  c.batch(3).q_len(1).kv_len(600).heads(4, 4).head_dim(128).dtypes(BF16, BF16, F32)
      .kv_lengths({600, 1, 0}).seed(23).Test(ctx_);
}

TEST_P(DecodeBf16Scores, MultiRowCausalTreeSoftcapAndAdditive) {
  AttentionCase causal;
  causal.q_len(7).kv_len(520).heads(8, 2).head_dim(128).dtypes(BF16, BF16, F32)
      .causal().seed(24).Test(ctx_);
  AttentionCase tree;
  tree.q_len(8).kv_len(400).heads(4, 1).head_dim(64).dtypes(BF16, BF16, F32)
      .causal().tree(8).seed(25).Test(ctx_);
  AttentionCase softcap;
  softcap.q_len(1).kv_len(333).heads(4, 2).head_dim(128).dtypes(BF16, BF16, F32)
      .softcap(30.0f).seed(26).Test(ctx_);
  AttentionCase additive;
  additive.q_len(2).kv_len(290).heads(2, 2).head_dim(64).dtypes(BF16, BF16, F32)
      .additive().seed(27).Test(ctx_);
}

TEST_P(DecodeBf16Scores, F32QueryKeepsTheWideningPath) {
  AttentionCase c;
  c.q_len(1).kv_len(500).heads(8, 2).head_dim(128).dtypes(F32, BF16, F32).seed(28).Test(ctx_);
}

INSTANTIATE_TEST_SUITE_P(DotOnOff, DecodeBf16Scores, testing::Values("1", "0"),
                         [](const testing::TestParamInfo<const char *> &param) {
                           return std::string(param.param) == "1" ? "dot" : "widened";
                         });

// Unset, the dot products run on AMD CPUs with AVX512-BF16 only (one
// VDPBF16PS cost 3-5 FMAs on the Xeon the project measures on).
TEST(DecodeBf16ScoresDefault, DotProductsOnExactlyOnAmdWithAvx512Bf16) {
  unsetenv("FLASHCPU_DECODE_BF16_DOT");
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  const std::string text = ContextDescription(ctx);
  flashcpu_context_destroy(ctx);
  if (text.find("split KV: fc_attention_decode_splitkv__avx512") == std::string::npos)
    GTEST_SKIP() << "no AVX-512 split-KV kernel here";
  const bool named =
      text.find("split KV scores, bf16 q and k: fc_bf16_splitkv_scores__avx512bf16") !=
      std::string::npos;
  EXPECT_EQ(named, CpuHasFeature("avx512_bf16") && VendorIsAmd()) << text;
}

}  // namespace
}  // namespace fctest
