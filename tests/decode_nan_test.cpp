// NaN through split-KV decode (the kernel flashcpu picks for 1 to 8 query
// rows), on each ISA's split-KV kernel this CPU runs: NaN in what a row
// reads (q, a visible K or V row) reaches that row's output, in whichever
// split it lies; NaN in keys the row does not see does not. Each case is
// also compared with the oracle.
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

// 600 keys: three splits of 256 keys (the last partial). GQA 4.
constexpr int64_t kS = 600, kHq = 8, kHkv = 2, kD = 128;

class DecodeNan : public testing::TestWithParam<std::tuple<flashcpu_isa, flashcpu_dtype>> {
 protected:
  void SetUp() override {
    const flashcpu_isa isa = std::get<0>(GetParam());
    if (!flashcpu_isa_supported(isa))
      GTEST_SKIP() << "this CPU (or its OS) lacks " << flashcpu_isa_name(isa);
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.max_isa = isa;
    ASSERT_EQ(flashcpu_context_create(&options, &ctx_), FLASHCPU_OK);
    const std::string kernel =
        std::string("split KV: fc_attention_decode_splitkv__") + flashcpu_isa_name(isa);
    ASSERT_NE(ContextDescription(ctx_).find(kernel), std::string::npos) << ContextDescription(ctx_);
  }
  void TearDown() override {
    if (ctx_) flashcpu_context_destroy(ctx_);
  }
  AttentionCase &Configure(AttentionCase &c, int64_t rows) {
    const flashcpu_dtype t = std::get<1>(GetParam());
    return c.batch(2).q_len(rows).kv_len(kS).heads(kHq, kHkv).head_dim(kD)
        .causal().dtypes(t, t, t).seed(97);
  }
  flashcpu_context *ctx_ = nullptr;
};

// The one row of batch b is NaN (output and lse) for the heads poisoned
// says and finite for the others; the other batch is finite throughout.
template <typename Poisoned>
void ExpectNanHeads(const AttentionCase &c, int64_t b, Poisoned poisoned) {
  for (int64_t h = 0; h < kHq; h++) {
    if (poisoned(h)) {
      EXPECT_TRUE(c.out_row_has_nan(b, 0, h)) << "head " << h;
      EXPECT_TRUE(std::isnan(c.lse_at(b, h, 0))) << "head " << h;
    } else {
      EXPECT_TRUE(c.out_row_finite(b, 0, h)) << "head " << h;
    }
    EXPECT_TRUE(c.out_row_finite(1 - b, 0, h)) << "other batch, head " << h;
  }
}

TEST_P(DecodeNan, NanQueryPoisonsOnlyThatHead) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.q().Set(1, 0, 5, 100, NAN);
  c.Test(ctx_);
  ExpectNanHeads(c, 1, [](int64_t h) { return h == 5; });
}

TEST_P(DecodeNan, NanKeyInAMiddleSplitPoisonsItsGroup) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.k().Set(0, 300, 1, 64, NAN);  // split 1, kv head 1: q heads 4..7
  c.Test(ctx_);
  ExpectNanHeads(c, 0, [](int64_t h) { return h / 4 == 1; });
}

TEST_P(DecodeNan, NanValuePoisonsThatElement) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.v().Set(0, 520, 0, 7, NAN);  // split 2, kv head 0: q heads 0..3
  c.Test(ctx_);
  for (int64_t h = 0; h < kHq; h++) {
    EXPECT_EQ(std::isnan(c.out_at(0, 0, h, 7)), h < 4) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.out_at(0, 0, h, 6))) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.lse_at(0, h, 0))) << "V does not enter lse";
  }
}

TEST_P(DecodeNan, HiddenKeysAreIgnoredAcrossRows) {
  // 4 rows, causal: row i sees keys up to kS - 4 + i; batch 1 holds 400
  // keys, and the rows after them are not part of the call.
  AttentionCase c;
  Configure(c, 4).kv_lengths({kS, 400}).Build();
  for (int64_t d = 0; d < kD; d++) {
    c.k().Set(0, kS - 1, 0, d, NAN);  // seen by row 3 only
    c.v().Set(0, kS - 1, 0, d, NAN);
    c.k().Set(1, 450, 1, d, NAN);     // past batch 1's length
    c.v().Set(1, 450, 1, d, NAN);
  }
  c.Test(ctx_);
  for (int64_t i = 0; i < 4; i++)
    for (int64_t h = 0; h < kHq; h++) {
      if (i == 3 && h < 4) {
        EXPECT_TRUE(c.out_row_has_nan(0, i, h)) << "row " << i << " head " << h;
      } else {
        EXPECT_TRUE(c.out_row_finite(0, i, h)) << "row " << i << " head " << h;
      }
      EXPECT_TRUE(c.out_row_finite(1, i, h)) << "batch 1 row " << i << " head " << h;
    }
}

INSTANTIATE_TEST_SUITE_P(
    IsasAndDtypes, DecodeNan,
    testing::Combine(testing::Values(FLASHCPU_ISA_AVX512, FLASHCPU_ISA_AVX2, FLASHCPU_ISA_NEON),
                     testing::Values(FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_BF16)),
    [](const testing::TestParamInfo<std::tuple<flashcpu_isa, flashcpu_dtype>> &param_info) {
      return std::string(flashcpu_isa_name(std::get<0>(param_info.param))) + "_" +
             flashcpu_dtype_name(std::get<1>(param_info.param));
    });

}  // namespace
}  // namespace fctest
