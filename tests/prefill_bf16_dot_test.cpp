// The opt-in AVX512-BF16 prefill variant (FLASHCPU_PREFILL_BF16_DOT=1: bf16
// Q and K by VDPBF16PS pair dot products) against the float64 oracle, on
// CPUs with AVX512-BF16. The variable is read when a context fills its
// kernel table, so each test makes its own context with it set and unsets
// it again: other tests' contexts never see it.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16, F32 = FLASHCPU_DTYPE_F32;

class PrefillBf16Dot : public testing::Test {
 protected:
  void SetUp() override {
    if (!CpuHasFeature("avx512_bf16"))
      GTEST_SKIP() << "this CPU lacks AVX512-BF16";
    setenv("FLASHCPU_PREFILL_BF16_DOT", "1", 1);
    ASSERT_EQ(flashcpu_context_create(nullptr, &ctx_), FLASHCPU_OK);
    unsetenv("FLASHCPU_PREFILL_BF16_DOT");
  }
  void TearDown() override { flashcpu_context_destroy(ctx_); }
  flashcpu_context *ctx_ = nullptr;
};

TEST_F(PrefillBf16Dot, ChosenForBf16AndNamedByVerbose) {
  flashcpu_context_destroy(ctx_);
  ctx_ = nullptr;
  setenv("FLASHCPU_PREFILL_BF16_DOT", "1", 1);
  setenv("FLASHCPU_VERBOSE", "1", 1);
  testing::internal::CaptureStderr();
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx_), FLASHCPU_OK);
  AttentionCase c;
  c.q_len(40).kv_len(60).heads(2, 1).head_dim(16).dtypes(BF16, BF16, F32).seed(2).Test(ctx_);
  const std::string log = testing::internal::GetCapturedStderr();
  unsetenv("FLASHCPU_VERBOSE");
  unsetenv("FLASHCPU_PREFILL_BF16_DOT");
  EXPECT_NE(log.find("attention B=1 L=40 S=60 Hq=2 Hkv=1 D=16: fc_attention_prefill__avx512bf16"),
            std::string::npos)
      << log;
}

TEST_F(PrefillBf16Dot, CausalGqaWithRemainders) {
  AttentionCase c;
  c.batch(2).q_len(77).kv_len(131).heads(8, 2).head_dim(128).dtypes(BF16, BF16, F32)
      .causal().kv_lengths({131, 50}).seed(3).Test(ctx_);
}

TEST_F(PrefillBf16Dot, EveryHeadDimSpecialisationAndAGenericOne) {
  for (int64_t d : {64, 80, 96, 256, 34}) {
    AttentionCase c;
    c.q_len(40).kv_len(100).heads(4, 4).head_dim(d).dtypes(BF16, BF16, BF16).seed(5).Test(ctx_);
  }
}

TEST_F(PrefillBf16Dot, MasksAndSoftcap) {
  AttentionCase window;
  window.q_len(60).kv_len(200).heads(4, 1).head_dim(64).dtypes(BF16, BF16, F32)
      .causal().window(37, 0).seed(7).Test(ctx_);
  AttentionCase tree;
  tree.q_len(12).kv_len(90).heads(4, 2).head_dim(64).dtypes(BF16, BF16, F32)
      .causal().tree(12).seed(8).Test(ctx_);
  AttentionCase additive;
  additive.q_len(33).kv_len(70).heads(2, 2).head_dim(64).dtypes(BF16, BF16, F32)
      .additive().softcap(30.0f).seed(9).Test(ctx_);
}

}  // namespace
}  // namespace fctest
