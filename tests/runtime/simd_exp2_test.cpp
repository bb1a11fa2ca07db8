// The vector exp2 the kernels use, on its own, for every ISA's copy
// (fc512_exp2, fc256_exp2, fcn_exp2): accuracy in ulps over the whole f32
// range the kernels feed it ([-150, 128], subnormal results included), and
// the special values (-inf, +inf, NaN, underflow, overflow) in every lane.
// Each ISA's copy is reached through a C shim compiled with that ISA's
// flags; a copy not built for this target, or one this CPU cannot run, is
// skipped.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "flashcpu/flashcpu.h"

extern "C" {
#if defined(__x86_64__)
void fc_test_exp2_avx512(const float *input, float *output, int count);
void fc_test_exp2_avx2(const float *input, float *output, int count);
#endif
#if defined(__aarch64__)
void fc_test_exp2_neon(const float *input, float *output, int count);
#endif
}

namespace {

using Exp2Fn = void (*)(const float *, float *, int);

struct Exp2Isa {
  const char *name;
  flashcpu_isa isa;
  Exp2Fn fn; // nullptr: not built for this target
  int lanes;
};

const Exp2Isa kIsas[] = {
#if defined(__x86_64__)
    {"avx512", FLASHCPU_ISA_AVX512, fc_test_exp2_avx512, 16},
    {"avx2", FLASHCPU_ISA_AVX2, fc_test_exp2_avx2, 8},
#else
    {"avx512", FLASHCPU_ISA_AVX512, nullptr, 16},
    {"avx2", FLASHCPU_ISA_AVX2, nullptr, 8},
#endif
#if defined(__aarch64__)
    {"neon", FLASHCPU_ISA_NEON, fc_test_exp2_neon, 4},
#else
    {"neon", FLASHCPU_ISA_NEON, nullptr, 4},
#endif
};

// ctest names the discovered tests by their parameter: just the ISA.
void PrintTo(const Exp2Isa &isa, std::ostream *os) { *os << isa.name; }

const float kInf = std::numeric_limits<float>::infinity();

class SimdExp2 : public testing::TestWithParam<Exp2Isa> {
protected:
  void SetUp() override {
    if (!GetParam().fn)
      GTEST_SKIP() << GetParam().name << " exp2 is not built for this target";
    if (!flashcpu_isa_supported(GetParam().isa))
      GTEST_SKIP() << "this CPU (or its OS) lacks " << GetParam().name;
  }
  std::vector<float> Exp2(const std::vector<float> &x) const {
    std::vector<float> y(x.size(), -1.0f);
    GetParam().fn(x.data(), y.data(), static_cast<int>(x.size()));
    return y;
  }
};

// The ulp of the f32 result nearest `exact` (subnormal results have the
// fixed ulp 2^-149).
double UlpOf(double exact) {
  int exponent = exact > 0.0 ? std::ilogb(exact) : -126;
  if (exponent < -126) exponent = -126;
  return std::ldexp(1.0, exponent - 23);
}

float BitsToFloat(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Every input the sweep uses, all in [-150, 128]: a dense linear sweep, every
// 2039th f32 of either sign (so |x| down to the smallest subnormal, where
// 2^x is 1 to within an ulp), the integers and the half-integers (the
// rounding boundary of n = round(x)) and their neighbours.
std::vector<float> SweepInputs() {
  std::vector<float> x;
  for (double v = -150.0; v < 128.0; v += 0.000731)
    x.push_back(static_cast<float>(v));
  const uint32_t top_positive = 0x43000000u; // 128.0f
  const uint32_t top_negative = 0xC3160000u; // -150.0f
  for (uint32_t bits = 0; bits <= top_positive; bits += 2039)
    x.push_back(BitsToFloat(bits));
  for (uint32_t bits = 0x80000000u; bits <= top_negative; bits += 2039)
    x.push_back(BitsToFloat(bits));
  for (int n = -300; n < 256; n++) {
    const float v = static_cast<float>(n) * 0.5f;
    for (float near : {std::nextafter(v, -kInf), v, std::nextafter(v, kInf)})
      if (near >= -150.0f && near < 128.0f) x.push_back(near);
  }
  return x;
}

TEST_P(SimdExp2, WithinTwoUlpsOverTheWholeRange) {
  const std::vector<float> x = SweepInputs();
  const std::vector<float> y = Exp2(x);
  double worst = 0.0, worst_subnormal = 0.0;
  float worst_x = 0.0f;
  int failures = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double exact = std::exp2(static_cast<double>(x[i]));
    const double error =
        std::fabs(static_cast<double>(y[i]) - exact) / UlpOf(exact);
    if (exact < FLT_MIN && error > worst_subnormal) worst_subnormal = error;
    if (error > worst) {
      worst = error;
      worst_x = x[i];
    }
    if (!(error <= 2.0) && failures++ < 10)
      ADD_FAILURE() << "x = " << x[i] << " (" << std::hexfloat << x[i]
                    << std::defaultfloat << "): got " << y[i] << ", exact "
                    << exact << ", " << error << " ulp";
  }
  EXPECT_EQ(failures, 0) << "inputs over 2 ulp, of " << x.size();
  RecordProperty("worst_ulp", std::to_string(worst));
  RecordProperty("worst_ulp_subnormal", std::to_string(worst_subnormal));
  std::printf("%s exp2: %zu inputs in [-150, 128), worst %.3f ulp at x = %a, "
              "worst %.3f ulp "
              "where the result is subnormal\n",
              GetParam().name, x.size(), worst, static_cast<double>(worst_x),
              worst_subnormal);
}

TEST_P(SimdExp2, IntegersGiveExactPowersOfTwo) {
  std::vector<float> x;
  for (int n = -149; n <= 127; n++) x.push_back(static_cast<float>(n));
  const std::vector<float> y = Exp2(x);
  for (size_t i = 0; i < x.size(); i++)
    EXPECT_EQ(y[i], std::ldexp(1.0f, static_cast<int>(x[i]))) << "x = " << x[i];
}

struct Special {
  float x;
  enum Expect { kExact, kNan, kZeroOrSmallestSubnormal, kWithinTwoUlps } expect;
  float value; // for kExact
};

std::vector<Special> Specials() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float below_128 = std::nextafter(128.0f, 0.0f);
  return {
      {-kInf, Special::kExact, 0.0f}, // a hidden key's weight is exactly 0
      {kInf, Special::kExact, kInf},
      {nan, Special::kNan, 0.0f}, // NaN scores must poison the row
      {-nan, Special::kNan, 0.0f},
      {BitsToFloat(0x7fc12345u), Special::kNan, 0.0f}, // a NaN with a payload
      {0.0f, Special::kExact, 1.0f},
      {-0.0f, Special::kExact, 1.0f},
      {FLT_TRUE_MIN, Special::kExact, 1.0f},
      {-FLT_TRUE_MIN, Special::kExact, 1.0f},
      {1.0f, Special::kExact, 2.0f},
      {-1.0f, Special::kExact, 0.5f},
      {0.5f, Special::kWithinTwoUlps, 0.0f},
      {127.0f, Special::kExact, std::ldexp(1.0f, 127)},
      {127.5f, Special::kWithinTwoUlps, 0.0f},
      {below_128, Special::kWithinTwoUlps, 0.0f}, // just below FLT_MAX: finite
      {128.0f, Special::kExact, kInf},
      {std::nextafter(128.0f, kInf), Special::kExact, kInf},
      {128.5f, Special::kExact, kInf},
      {129.0f, Special::kExact, kInf},
      {200.0f, Special::kExact, kInf},
      {1e30f, Special::kExact, kInf},
      {FLT_MAX, Special::kExact, kInf},
      {-126.0f, Special::kExact, std::ldexp(1.0f, -126)},
      {-126.5f, Special::kWithinTwoUlps, 0.0f}, // subnormal result
      {-140.25f, Special::kWithinTwoUlps, 0.0f},
      {-149.0f, Special::kExact, std::ldexp(1.0f, -149)}, // smallest subnormal
      {-149.5f, Special::kExact,
       std::ldexp(1.0f, -149)}, // 0.707 * 2^-149 rounds up
      {-150.0f, Special::kZeroOrSmallestSubnormal, 0.0f}, // exactly half way
      {-150.5f, Special::kExact, 0.0f},
      {-151.0f, Special::kExact, 0.0f},
      {-200.0f, Special::kExact, 0.0f},
      {-1e30f, Special::kExact, 0.0f},
      {-FLT_MAX, Special::kExact, 0.0f},
  };
}

// Each special value in every lane position (with a tail shorter than a
// vector too), surrounded by ordinary inputs that must stay unaffected.
TEST_P(SimdExp2, SpecialValuesInEveryLane) {
  const int lanes = GetParam().lanes;
  for (const Special &s : Specials()) {
    for (int count : {2 * lanes, lanes + 3}) {
      for (int lane = 0; lane < count; lane++) {
        std::vector<float> x(static_cast<size_t>(count), 0.5f);
        x[static_cast<size_t>(lane)] = s.x;
        const std::vector<float> y = Exp2(x);
        for (int i = 0; i < count; i++) {
          if (i == lane) continue;
          ASSERT_NEAR(y[static_cast<size_t>(i)], std::sqrt(2.0f), 2.5e-7f)
              << "lane " << i << " beside x = " << s.x << " in lane " << lane;
        }
        const float got = y[static_cast<size_t>(lane)];
        const std::string where = "x = " + std::to_string(s.x) + " (" +
                                  std::to_string(lane) + " of " +
                                  std::to_string(count) + ")";
        switch (s.expect) {
        case Special::kExact:
          ASSERT_EQ(got, s.value) << where;
          if (s.value == 0.0f) {
            ASSERT_FALSE(std::signbit(got)) << where << ": -0";
          }
          break;
        case Special::kNan:
          ASSERT_TRUE(std::isnan(got)) << where << ": got " << got;
          break;
        case Special::kZeroOrSmallestSubnormal:
          ASSERT_TRUE(got == 0.0f || got == FLT_TRUE_MIN)
              << where << ": got " << got;
          break;
        case Special::kWithinTwoUlps: {
          const double exact = std::exp2(static_cast<double>(s.x));
          ASSERT_TRUE(std::isfinite(got)) << where << ": got " << got;
          ASSERT_LE(std::fabs(static_cast<double>(got) - exact) / UlpOf(exact),
                    2.0)
              << where << ": got " << got << ", exact " << exact;
          break;
        }
        }
      }
    }
  }
}

// What the online softmax feeds it: score - max <= 0, so results in (0, 1],
// and differences of -inf. Monotone: a larger score never weighs less.
TEST_P(SimdExp2, MonotoneOverNonPositiveInputs) {
  std::vector<float> x;
  for (float v = -150.0f; v <= 0.0f; v += 0.0625f) x.push_back(v);
  const std::vector<float> y = Exp2(x);
  for (size_t i = 1; i < x.size(); i++)
    ASSERT_LE(y[i - 1], y[i]) << "x = " << x[i - 1] << " and " << x[i];
  EXPECT_EQ(y.back(), 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Isas, SimdExp2, testing::ValuesIn(kIsas),
                         [](const testing::TestParamInfo<Exp2Isa> &param_info) {
                           return std::string(param_info.param.name);
                         });

} // namespace
