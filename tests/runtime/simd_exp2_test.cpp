// The vector exp2 the kernels use, on its own: accuracy in ulps over the
// whole f32 range, and the special values (-inf, +inf, NaN, underflow).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flashcpu/flashcpu.h"

extern "C" void fc_test_exp2_avx512(const float *input, float *output,
                                    int count);

namespace {

std::vector<float> Exp2Avx512(const std::vector<float> &x) {
  std::vector<float> y(x.size());
  fc_test_exp2_avx512(x.data(), y.data(), static_cast<int>(x.size()));
  return y;
}

TEST(SimdExp2, Avx512WithinTwoUlpsOverTheNormalRange) {
  if (!flashcpu_isa_supported(FLASHCPU_ISA_AVX512))
    GTEST_SKIP() << "avx512 not supported on this CPU";
  std::vector<float> x;
  for (double v = -126.0; v < 128.0; v += 0.000731) x.push_back((float)v);
  std::vector<float> y = Exp2Avx512(x);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); i++) {
    double exact = std::exp2((double)x[i]);
    double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    double error = std::fabs((double)y[i] - exact) / ulp;
    if (error > worst) worst = error;
    ASSERT_LE(error, 2.0) << "x = " << x[i];
  }
  RecordProperty("worst_ulp", std::to_string(worst));
}

TEST(SimdExp2, Avx512SpecialValues) {
  if (!flashcpu_isa_supported(FLASHCPU_ISA_AVX512))
    GTEST_SKIP() << "avx512 not supported on this CPU";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, inf, std::nanf(""), 0.0f, -0.0f, 1.0f,
                          -1.0f, 127.0f, 128.0f, 200.0f, -126.0f, -149.0f,
                          -150.0f, -200.0f, -1e30f, 1e30f, 0.5f};
  std::vector<float> y = Exp2Avx512(x);
  EXPECT_EQ(y[0], 0.0f);  // a hidden key's weight is exactly 0
  EXPECT_EQ(y[1], inf);
  EXPECT_TRUE(std::isnan(y[2]));  // NaN scores must poison the row
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[4], 1.0f);
  EXPECT_EQ(y[5], 2.0f);
  EXPECT_EQ(y[6], 0.5f);
  EXPECT_EQ(y[7], std::ldexp(1.0f, 127));
  EXPECT_EQ(y[8], inf);
  EXPECT_EQ(y[9], inf);
  EXPECT_EQ(y[10], std::ldexp(1.0f, -126));
  EXPECT_EQ(y[11], std::ldexp(1.0f, -149));  // smallest subnormal
  EXPECT_GE(y[12], 0.0f);
  EXPECT_LE(y[12], std::ldexp(1.0f, -149));
  EXPECT_EQ(y[13], 0.0f);
  EXPECT_EQ(y[14], 0.0f);
  EXPECT_EQ(y[15], inf);
  EXPECT_NEAR(y[16], std::sqrt(2.0f), 2e-7f);
}

}  // namespace
