// The library's scalar f16/bf16 conversions (src/common/dtype_convert.h)
// against the tests' own, written another way (half_float.h: frexp, ldexp
// and nearbyint on doubles), and against the compiler's _Float16 where it
// has one. Widening is checked on all 65536 inputs; narrowing on every
// value next to a rounding boundary (each 16-bit value, the midpoints to
// its neighbour and one float either side of them), the overflow edges,
// subnormals, infinities, NaNs and a million random floats.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_tensor.h" // Rng (header-only)

extern "C" {
float fctest_f16_to_f32(uint16_t half);
uint16_t fctest_f32_to_f16(float value);
float fctest_bf16_to_f32(uint16_t value);
uint16_t fctest_f32_to_bf16(float value);
}

namespace fctest {
namespace {

uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float FloatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

bool IsHalfNan(uint16_t bits) {
  return (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0;
}
bool IsBfloat16Nan(uint16_t bits) {
  return (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0;
}

// Floats on and around the rounding boundaries of a 16-bit format whose
// values are decode(0..0xffff): each value, the midpoint to the next one
// (exact in f32: it needs one bit more than the format has), and the
// floats one step either side of each.
std::vector<float> BoundaryFloats(double (*decode)(uint16_t)) {
  std::vector<float> floats;
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    const double value = decode(static_cast<uint16_t>(bits));
    if (!std::isfinite(value)) continue;
    const double next = decode(static_cast<uint16_t>(bits + 1));
    floats.push_back(static_cast<float>(value));
    if (std::isfinite(next) && std::fabs(next) > std::fabs(value)) {
      const float middle = static_cast<float>((value + next) / 2);
      EXPECT_EQ(static_cast<double>(middle), (value + next) / 2)
          << "midpoint not exact";
      floats.push_back(middle);
      floats.push_back(std::nextafter(middle, 0.0f));
      floats.push_back(std::nextafter(middle, 2.0f * middle));
    }
  }
  return floats;
}

std::vector<float> SpecialFloats() {
  std::vector<float> floats = {0.0f,
                               -0.0f,
                               INFINITY,
                               -INFINITY,
                               65504.0f,
                               65519.996f,
                               65520.0f,
                               -65520.0f,
                               65536.0f,
                               1e30f,
                               3.4028235e38f,
                               -3.4028235e38f,
                               std::ldexp(1.0f, -24),
                               std::ldexp(1.0f, -25),
                               std::ldexp(1.5f, -25),
                               std::ldexp(1.0f, -26),
                               std::ldexp(1.0f, -14),
                               std::ldexp(1.0f, -133),
                               std::ldexp(1.0f, -134),
                               std::ldexp(1.5f, -134),
                               1.0e-45f,
                               -1.0e-45f,
                               1.17549435e-38f,
                               1.1754942e-38f};
  floats.push_back(std::nextafter(65520.0f, 0.0f));
  floats.push_back(
      std::nextafter(3.3961776e38f, INFINITY)); // bf16 overflow edge
  Rng rng(2024);
  for (int n = 0; n < 1000000; n++)
    floats.push_back(FloatOf(static_cast<uint32_t>(rng.NextU64())));
  return floats;
}

TEST(DtypeConvert, HalfToFloatAllInputs) {
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float got = fctest_f16_to_f32(half);
    if (IsHalfNan(half)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << bits;
      EXPECT_EQ(std::signbit(got), (bits & 0x8000) != 0) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(BitsOf(got), BitsOf(static_cast<float>(DecodeHalf(half))))
        << std::hex << bits;
  }
}

TEST(DtypeConvert, Bfloat16ToFloatAllInputs) {
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    const uint16_t value = static_cast<uint16_t>(bits);
    const float got = fctest_bf16_to_f32(value);
    if (IsBfloat16Nan(value)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(BitsOf(got), BitsOf(static_cast<float>(DecodeBfloat16(value))))
        << std::hex << bits;
  }
}

void CheckNarrowing(const std::vector<float> &inputs,
                    uint16_t (*convert)(float), uint16_t (*reference)(double),
                    bool (*is_nan)(uint16_t)) {
  int64_t failures = 0;
  for (float input : inputs) {
    const uint16_t got = convert(input);
    if (std::isnan(input)) {
      EXPECT_TRUE(is_nan(got))
          << "NaN " << std::hex << BitsOf(input) << " became " << got;
      continue;
    }
    const uint16_t expected = reference(input);
    if (got != expected && failures++ < 10)
      ADD_FAILURE() << "input " << input << " (0x" << std::hex << BitsOf(input)
                    << "): got 0x" << got << ", expected 0x" << expected;
  }
  EXPECT_EQ(failures, 0);
}

TEST(DtypeConvert, FloatToHalfRoundsToNearestEven) {
  CheckNarrowing(BoundaryFloats(DecodeHalf), fctest_f32_to_f16, EncodeHalf,
                 IsHalfNan);
  CheckNarrowing(SpecialFloats(), fctest_f32_to_f16, EncodeHalf, IsHalfNan);
}

TEST(DtypeConvert, FloatToBfloat16RoundsToNearestEven) {
  CheckNarrowing(BoundaryFloats(DecodeBfloat16), fctest_f32_to_bf16,
                 EncodeBfloat16, IsBfloat16Nan);
  CheckNarrowing(SpecialFloats(), fctest_f32_to_bf16, EncodeBfloat16,
                 IsBfloat16Nan);
}

TEST(DtypeConvert, HalfOverflowBoundary) {
  // 65504 is the largest half; 65520 is the midpoint to 2^16, which rounds
  // to even (the infinity side); just below it rounds down.
  EXPECT_EQ(fctest_f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(fctest_f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(fctest_f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(fctest_f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(fctest_f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(fctest_f32_to_f16(std::ldexp(1.0f, -25)), 0x0000); // tie to even: 0
  EXPECT_EQ(fctest_f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fctest_f32_to_f16(std::ldexp(3.0f, -25)),
            0x0002); // 1.5 ulp: tie to even 2
}

TEST(DtypeConvert, NegativeNanStaysNanThroughBothFormats) {
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                        0x7fbfffffu, 0x7f802000u}) {
    EXPECT_TRUE(IsHalfNan(fctest_f32_to_f16(FloatOf(bits))))
        << std::hex << bits;
    EXPECT_TRUE(IsBfloat16Nan(fctest_f32_to_bf16(FloatOf(bits))))
        << std::hex << bits;
  }
}

// g++ 12 on aarch64 defines __FLT16_MAX__ but has _Float16 in C only.
#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__clang__))
// A third, independent reference where the compiler has one.
TEST(DtypeConvert, AgreesWithCompilerFloat16) {
  Rng rng(7);
  for (int n = 0; n < 200000; n++) {
    const float input = FloatOf(static_cast<uint32_t>(rng.NextU64()));
    if (std::isnan(input)) continue;
    const _Float16 native = static_cast<_Float16>(input);
    uint16_t bits;
    std::memcpy(&bits, &native, sizeof bits);
    ASSERT_EQ(fctest_f32_to_f16(input), bits) << input;
  }
}
#endif

} // namespace
} // namespace fctest
