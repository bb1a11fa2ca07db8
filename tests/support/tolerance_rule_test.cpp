// The checking machinery must be able to fail: the tolerance rule on
// hand-made numbers, and AttentionCase's checks on a real call's results
// corrupted after the fact.
#include <cmath>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "fixtures.h"
#include "tolerance.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16;

testing::AssertionResult Judge(flashcpu_dtype dtype, double kernel, double oracle, double naive) {
  ToleranceRule rule("out", dtype);
  rule.Add(1.0, 1.0, {1.0}, {});  // an exact element alongside
  rule.Add(kernel, oracle, {naive}, {0, 0, 1, 0});
  return rule.Verdict();
}

TEST(ToleranceRule, BoundIsTwiceErrBasePlusFloor) {
  const double oracle = 0.75, err_base = 1e-6;
  const double floor = 2 * UlpOf(F32, oracle);
  EXPECT_TRUE(Judge(F32, oracle, oracle, oracle + err_base));
  EXPECT_TRUE(Judge(F32, oracle + 2 * err_base + 0.9 * floor, oracle, oracle + err_base));
  EXPECT_FALSE(Judge(F32, oracle + 2 * err_base + 1.1 * floor, oracle, oracle + err_base));
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
    c_.batch(2).q_len(20).kv_len(70).heads(4, 2).head_dim(24).causal()
        .layout(Layout::kCache).dtypes(F16, F16, F32).seed(3);
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
  c_.lse_storage_for_checker_tests(16 + 5) += 1e-3f;  // element 5 after the guard
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AWriteOutsideLse) {
  c_.lse_storage_for_checker_tests(15) = 0.0f;  // the last guard word before lse
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

TEST_F(CheckerDetects, AChangedInput) {
  c_.v().Set(0, 3, 1, 2, 0.125);
  EXPECT_FALSE(c_.CheckAgainstOracle());
}

}  // namespace
}  // namespace fctest
