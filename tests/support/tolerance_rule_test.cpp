// The checking machinery must be able to fail: the tolerance rule on
// hand-made numbers, and AttentionCase's checks on a real call's results
// corrupted after the fact.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "fixtures.h"
#include "tolerance.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

testing::AssertionResult Judge(flashcpu_dtype dtype, double kernel,
                               double oracle, double naive) {
  ToleranceRule rule("out", dtype);
  rule.Add(1.0, 1.0, {1.0}, {}); // an exact element alongside
  rule.Add(kernel, oracle, {naive}, {0, 0, 1, 0});
  return rule.Verdict();
}

TEST(ToleranceRule, BoundIsTwiceErrBasePlusFloor) {
  const double oracle = 0.75, err_base = 1e-6;
  const double floor = 2 * UlpOf(F32, oracle);
  EXPECT_TRUE(Judge(F32, oracle, oracle, oracle + err_base));
  EXPECT_TRUE(Judge(F32, oracle + 2 * err_base + 0.9 * floor, oracle,
                    oracle + err_base));
  EXPECT_FALSE(Judge(F32, oracle + 2 * err_base + 1.1 * floor, oracle,
                     oracle + err_base));
  EXPECT_FALSE(Judge(F32, oracle - 2.5 * err_base, oracle, oracle - err_base));
}

TEST(ToleranceRule, ErrBaseIsTheLargestNaiveError) {
  ToleranceRule rule("out", F32);
  rule.Add(0.5, 0.5, {0.5 + 1e-7, 0.5 - 3e-6}, {});
  EXPECT_NEAR(rule.err_base(), 3e-6, 1e-12);
  rule.Add(0.25 + 5e-6, 0.25, {0.25}, {});
  EXPECT_TRUE(rule.Verdict());
  rule.Add(0.25 + 7e-6, 0.25, {0.25}, {});
  EXPECT_FALSE(rule.Verdict());
}

TEST(ToleranceRule, FloorIsUlpsOfTheOutputDtype) {
  // err_base 0: only the floor, 2 ulp of f16 at 1.0 (2^-10 each).
  EXPECT_TRUE(Judge(F16, 1.0 + 2 * std::ldexp(1.0, -10), 1.0, 1.0));
  EXPECT_FALSE(Judge(F16, 1.0 + 3 * std::ldexp(1.0, -10), 1.0, 1.0));
  EXPECT_FALSE(Judge(F32, 1.0 + 3 * std::ldexp(1.0, -23), 1.0, 1.0));
}

TEST(ToleranceRule, NanAndInfinityMustMatchExactly) {
  EXPECT_FALSE(Judge(F32, NAN, 0.5, 0.5)) << "NaN where the oracle has none";
  EXPECT_FALSE(Judge(F32, 0.5, NAN, NAN)) << "no NaN where the oracle has one";
  EXPECT_TRUE(Judge(F32, NAN, NAN, NAN));
  EXPECT_TRUE(Judge(F32, -INFINITY, -INFINITY, -INFINITY));
  EXPECT_FALSE(Judge(F32, -80.0, -INFINITY, -INFINITY));
  EXPECT_FALSE(Judge(F32, -INFINITY, -80.0, -80.0));
  EXPECT_FALSE(Judge(F32, INFINITY, 1e30, 1e30));
}

TEST(ToleranceRule, RefusesANaiveReferenceThatDisagreesWithTheOracle) {
  const testing::AssertionResult verdict = Judge(F32, 0.5, 0.5, 0.6);
  EXPECT_FALSE(verdict);
  EXPECT_NE(std::string(verdict.message()).find("test bug"), std::string::npos);
}

// A real call that passes, then one corruption at a time.
class CheckerDetects : public testing::Test {
protected:
  void SetUp() override {
    c_.batch(2)
        .q_len(20)
        .kv_len(70)
        .heads(4, 2)
        .head_dim(24)
        .causal()
        .layout(Layout::kCache)
        .dtypes(F16, F16, F32)
        .seed(3);
    c_.Build();
    ASSERT_EQ(c_.Run(SharedContext()), FLASHCPU_OK);
    ASSERT_TRUE(c_.CheckAgainstOracle());
  }
  void Corrupt(int64_t b, int64_t i, int64_t h, int64_t d, double value) {
    c_.out_for_checker_tests().Set(b, i, h, d, value);
  }
  AttentionCase c_;
};

TEST_F(CheckerDetects, ASmallErrorInOneElement) {
  // Outputs are O(0.1..1) and float32 errs by ~1e-7 here: 1e-4 is far out.
  Corrupt(1, 19, 3, 23, c_.out_at(1, 19, 3, 23) + 1e-4);
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AnUnwrittenElement) {
  Corrupt(0, 7, 2, 0, NAN);
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AWriteOutsideTheOutView) {
  // Row 20 is cache capacity past L = 20: outside the view.
  c_.out_for_checker_tests().Set(0, 20, 0, 0, 1.0);
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AWrongLse) {
  c_.lse_storage_for_checker_tests(16 + 5) +=
      1e-3f; // element 5 after the guard
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AWriteOutsideLse) {
  c_.lse_storage_for_checker_tests(15) = 0.0f; // the last guard word before lse
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AChangedInput) {
  c_.v().Set(0, 3, 1, 2, 0.125);
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

// The paged re-run compares bytes: one ulp in one element of the contiguous
// result, or in one lse, is a difference.
TEST_F(CheckerDetects, AnOutputByteThePagedPathDoesNotWrite) {
  const testing::AssertionResult same = c_.CheckPagedMatches(SharedContext());
  ASSERT_TRUE(same);
  EXPECT_STREQ(same.message(), "")
      << "the paged re-run must run here, not skip";
  const float x = static_cast<float>(c_.out_at(1, 13, 2, 5));
  Corrupt(1, 13, 2, 5, std::nextafter(x, INFINITY));
  EXPECT_FALSE(c_.CheckPagedMatches(SharedContext()));
}

TEST_F(CheckerDetects, AnLseBitThePagedPathDoesNotWrite) {
  float &lse =
      c_.lse_storage_for_checker_tests(16 + 2 * 20 + 7); // (b 0, h 2, i 7)
  lse = std::nextafter(lse, -INFINITY);
  EXPECT_FALSE(c_.CheckPagedMatches(SharedContext()));
}

TEST(PagedRerun, SkipsAliasedInputs) {
  AttentionCase c;
  c.q_len(3).kv_len(40).heads(2, 1).head_dim(8).values_alias_keys().seed(9);
  ASSERT_EQ(c.Run(SharedContext()), FLASHCPU_OK);
  const testing::AssertionResult verdict = c.CheckPagedMatches(SharedContext());
  EXPECT_TRUE(verdict);
  EXPECT_EQ(std::string(verdict.message()).rfind("skipped", 0), 0u)
      << verdict.message();
}

// Sinks and ALiBi through the builder, the oracle, the naive references and
// the paged re-run, on the default kernel choice (decode and prefill). The
// kv lengths are below the capacity (the split plan follows the longest
// used), long enough for several decode splits, and short enough in batch 1
// for prefill rows that see no key (their lse is the sink).
struct OptionCase {
  flashcpu_dtype sinks;
  bool alibi_per_batch;
  int64_t rows;
};

class SinksAndAlibi : public testing::TestWithParam<OptionCase> {};

TEST_P(SinksAndAlibi, PassTheOracleAndThePagedRerun) {
  const OptionCase o = GetParam();
  for (Magnitude magnitude : {Magnitude::kSmall, Magnitude::kLarge}) {
    AttentionCase c;
    c.batch(2)
        .q_len(o.rows)
        .kv_len(700)
        .heads(4, 2)
        .head_dim(24)
        .dtypes(F16, F16, F32)
        .kv_lengths({600, 57})
        .causal()
        .sinks(o.sinks)
        .alibi(o.alibi_per_batch)
        .magnitude(magnitude)
        .seed(static_cast<uint64_t>(o.rows));
    c.Test();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Options, SinksAndAlibi,
    testing::Values(OptionCase{F32, false, 1}, OptionCase{F16, true, 4},
                    OptionCase{BF16, false, 40}, OptionCase{F32, true, 100}),
    [](const testing::TestParamInfo<OptionCase> &param_info) {
      const OptionCase &o = param_info.param;
      return std::string("sinks_") + flashcpu_dtype_name(o.sinks) +
             (o.alibi_per_batch ? "_alibi_per_batch_" : "_alibi_") +
             std::to_string(o.rows) + "_rows";
    });

// The sinks are drawn where they matter: they take a real share of the
// softmax (the output shrinks), never all of it.
TEST(SinksBuilder, SinksTakeAShareOfEveryHeadsRows) {
  AttentionCase plain, sunk;
  for (AttentionCase *c : {&plain, &sunk})
    c->q_len(6)
        .kv_len(50)
        .heads(3, 1)
        .head_dim(16)
        .dtypes(F32, F32, F32)
        .seed(21);
  sunk.sinks();
  ASSERT_EQ(plain.Run(SharedContext()), FLASHCPU_OK);
  ASSERT_EQ(sunk.Run(SharedContext()), FLASHCPU_OK);
  for (int64_t h = 0; h < 3; h++) {
    double with = 0.0, without = 0.0;
    for (int64_t i = 0; i < 6; i++)
      for (int64_t d = 0; d < 16; d++) {
        with += std::fabs(sunk.out_at(0, i, h, d));
        without += std::fabs(plain.out_at(0, i, h, d));
      }
    EXPECT_GT(with / without, 0.1) << "head " << h;
    EXPECT_LT(with / without, 0.95) << "head " << h;
  }
}

TEST(SinksBuilder, DescribeNamesSinksAndAlibi) {
  AttentionCase c;
  c.sinks(BF16).alibi(true);
  const std::string text = c.Describe();
  EXPECT_NE(text.find(" sinks(bf16)"), std::string::npos) << text;
  EXPECT_NE(text.find(" alibi(per_batch)"), std::string::npos) << text;
}

} // namespace
} // namespace fctest
