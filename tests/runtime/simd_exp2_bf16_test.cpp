// The cheaper exp2 of the kernels that round their softmax weights to bf16
// (fc512_exp2_bf16): its relative error over the range of normal results,
// the exact values it promises (2^n for integers, 1 at 0 and just below
// it), 0 far below -149 and for -inf without a clamp, and NaN to NaN.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "flashcpu/flashcpu.h"

extern "C" {
#if defined(__x86_64__)
void fc_test_exp2_bf16_avx512(const float *input, float *output, int count);
#endif
}

namespace {

class SimdExp2Bf16 : public testing::Test {
protected:
  void SetUp() override {
#if !defined(__x86_64__)
    GTEST_SKIP() << "built for x86-64 only";
#endif
    if (!flashcpu_isa_supported(FLASHCPU_ISA_AVX512))
      GTEST_SKIP() << "this CPU (or its OS) lacks avx512";
  }
  static std::vector<float> Exp2(const std::vector<float> &x) {
    std::vector<float> y(x.size(), -1.0f);
#if defined(__x86_64__)
    fc_test_exp2_bf16_avx512(x.data(), y.data(), static_cast<int>(x.size()));
#endif
    return y;
  }
};

TEST_F(SimdExp2Bf16, RelativeErrorUnderTwoTenthsOfAMillionth) {
  std::vector<float> x;
  for (double v = -126.0; v < 127.0; v += 0.000731)
    x.push_back(static_cast<float>(v));
  const std::vector<float> y = Exp2(x);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); i++) {
    const double exact = std::exp2(static_cast<double>(x[i]));
    worst = std::fmax(worst, std::fabs(y[i] / exact - 1.0));
  }
  // 1.5e-7 of the polynomial plus the f32 roundings of its evaluation
  EXPECT_LT(worst, 2.5e-7);
}

TEST_F(SimdExp2Bf16, ExactAtIntegers) {
  std::vector<float> x;
  for (int n = -149; n <= 127; n++) x.push_back(static_cast<float>(n));
  const std::vector<float> y = Exp2(x);
  for (size_t i = 0; i < x.size(); i++)
    EXPECT_EQ(y[i], std::ldexp(1.0f, static_cast<int>(x[i]))) << "x = " << x[i];
}

TEST_F(SimdExp2Bf16, OneAtZeroAndJustBelowIt) {
  // -0 and the smallest negatives: x - floor(x) rounds to 1 there, the top
  // of the polynomial's interval, where it is pinned to 2
  const std::vector<float> x = {0.0f, -0.0f, -FLT_TRUE_MIN, -1e-30f, -FLT_MIN};
  const std::vector<float> y = Exp2(x);
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(y[i], 1.0f) << "x = " << x[i];
}

TEST_F(SimdExp2Bf16, ZeroFarBelowTheSmallestSubnormal) {
  const std::vector<float> x = {-151.0f, -160.5f, -1e30f, -FLT_MAX};
  const std::vector<float> y = Exp2(x);
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(y[i], 0.0f) << "x = " << x[i];
}

TEST_F(SimdExp2Bf16, MinusInfinityIsZeroAndNanStaysNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(19, 0.5f);
  x[3] = -inf;
  x[17] = nan;
  const std::vector<float> y = Exp2(x);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_TRUE(std::isnan(y[17]));
  EXPECT_EQ(y[4], y[0]); // neighbours unaffected
  EXPECT_EQ(y[16], y[0]);
}

} // namespace
