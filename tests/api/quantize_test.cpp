// Quantized K/V through the public API:
//  - flashcpu_dequantize gives, bit for bit, the values the oracle decodes
//    from the formats' definitions (every code of each 8-bit format, Q8_0
//    blocks, scales per tensor, token, channel, zero points), on every ISA
//    this CPU runs (each has its own row dequantizer);
//  - flashcpu_quantize rounds to the nearest code of the scale it computes
//    (I8, U8, F8, Q8_0 per token or block) or reads, saturates, and turns a
//    row with NaN into a NaN scale;
//  - errors: bad dtypes, scales, layouts and values leave dst untouched;
//  - flashcpu_kv_append into quantized pages (per-token scales computed)
//    writes the codes and scales flashcpu_quantize writes, and attention
//    through a plan over those pages writes the contiguous call's bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "flashcpu/flashcpu.h"
#include "oracle.h"
#include "test_tensor.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype I8 = FLASHCPU_DTYPE_I8, U8 = FLASHCPU_DTYPE_U8,
                         E4M3 = FLASHCPU_DTYPE_F8_E4M3,
                         E5M2 = FLASHCPU_DTYPE_F8_E5M2,
                         Q8_0 = FLASHCPU_DTYPE_Q8_0, F32 = FLASHCPU_DTYPE_F32;

bool SameValue(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

// A context per ISA this CPU runs, made once and destroyed at exit.
std::vector<flashcpu_context *> IsaContexts() {
  struct Contexts {
    std::vector<flashcpu_context *> list;
    Contexts() {
      for (flashcpu_isa isa : {FLASHCPU_ISA_SCALAR, FLASHCPU_ISA_AVX2,
                               FLASHCPU_ISA_AVX512, FLASHCPU_ISA_NEON}) {
        if (!flashcpu_isa_supported(isa)) continue;
        flashcpu_context_options options;
        flashcpu_context_options_init(&options);
        options.max_isa = isa;
        options.num_threads = 2;
        flashcpu_context *ctx = nullptr;
        if (flashcpu_context_create(&options, &ctx) == FLASHCPU_OK)
          list.push_back(ctx);
      }
    }
    ~Contexts() {
      for (flashcpu_context *ctx : list) flashcpu_context_destroy(ctx);
    }
  };
  static const Contexts contexts;
  return contexts.list;
}

TEST(Dequantize, EveryCodeAsTheOracleDecodesIt) {
  // [1, 256 tokens, 2 heads, 16]: token s holds code s in every element.
  constexpr int64_t S = 256, H = 2, D = 16;
  std::vector<unsigned char> codes(static_cast<size_t>(S * H * D));
  for (size_t i = 0; i < codes.size(); i++)
    codes[i] = static_cast<unsigned char>(i / (H * D));
  std::vector<float> scales(static_cast<size_t>(S * H)), zeros(scales.size()),
      channel(static_cast<size_t>(H * D));
  Rng rng(7);
  for (float &s : scales) s = static_cast<float>(rng.Uniform(0.001, 3.0));
  for (float &z : zeros) z = static_cast<float>(rng.Uniform(0.0, 255.0));
  for (float &c : channel) c = static_cast<float>(rng.Uniform(0.1, 2.0));
  struct Variant {
    flashcpu_dtype dtype;
    int scales; // 0 none, 1 per token, 2 per tensor, 3 per channel
    bool zeros;
  };
  for (const Variant &variant :
       {Variant{I8, 0, false}, Variant{I8, 1, false}, Variant{I8, 3, false},
        Variant{U8, 1, true}, Variant{U8, 2, false}, Variant{E4M3, 0, false},
        Variant{E4M3, 2, false}, Variant{E5M2, 0, false},
        Variant{E5M2, 1, false}})
    for (flashcpu_context *ctx : IsaContexts()) {
      flashcpu_kv_scales view{};
      view.dtype = F32;
      view.data = variant.scales == 3 ? channel.data() : scales.data();
      const int64_t strides[4][4] = {
          {0, 0, 0, 0}, {S * H, H, 1, 0}, {0, 0, 0, 0}, {0, 0, D, 1}};
      std::memcpy(view.strides, strides[variant.scales], sizeof view.strides);
      if (variant.zeros) view.zero_points = zeros.data();
      const flashcpu_kv_scales *use = variant.scales ? &view : nullptr;
      const flashcpu_tensor src =
          flashcpu_tensor_bshd(codes.data(), variant.dtype, 1, S, H, D);
      std::vector<float> out(codes.size(), -7.0f);
      const flashcpu_tensor dst =
          flashcpu_tensor_bshd(out.data(), F32, 1, S, H, D);
      ASSERT_EQ(flashcpu_dequantize(ctx, &src, use, &dst), FLASHCPU_OK)
          << flashcpu_last_error(ctx);
      for (int64_t s = 0; s < S; s++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t d = 0; d < D; d++) {
            const double expected =
                flashcpu_oracle_load_quantized(&src, use, 0, s, h, d);
            const double got = out[static_cast<size_t>((s * H + h) * D + d)];
            ASSERT_TRUE(SameValue(got, expected))
                << flashcpu_dtype_name(variant.dtype) << " code " << s
                << " head " << h << " d " << d << " on "
                << flashcpu_isa_name(flashcpu_context_isa(ctx)) << ": " << got
                << " vs " << expected;
          }
    }
}

TEST(Dequantize, Q8_0BlocksAsTheOracleDecodesThem) {
  constexpr int64_t S = 9, H = 3, D = 96;
  std::vector<unsigned char> blocks(static_cast<size_t>(S * H * D / 32 * 34));
  Rng rng(3);
  for (size_t b = 0; b < blocks.size() / 34; b++) {
    const uint16_t d = EncodeHalf(rng.Uniform(-0.1, 0.1));
    std::memcpy(&blocks[b * 34], &d, 2);
    for (int i = 0; i < 32; i++)
      blocks[b * 34 + 2 + i] = static_cast<unsigned char>(rng.Below(256));
  }
  const uint16_t nan = 0x7e00; // a NaN scale reads as NaN
  std::memcpy(&blocks[34 * 5], &nan, 2);
  const flashcpu_tensor src =
      flashcpu_tensor_bshd(blocks.data(), Q8_0, 1, S, H, D);
  for (flashcpu_context *ctx : IsaContexts()) {
    std::vector<float> out(static_cast<size_t>(S * H * D));
    const flashcpu_tensor dst =
        flashcpu_tensor_bshd(out.data(), F32, 1, S, H, D);
    ASSERT_EQ(flashcpu_dequantize(ctx, &src, nullptr, &dst), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    for (int64_t s = 0; s < S; s++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++)
          ASSERT_TRUE(SameValue(
              out[static_cast<size_t>((s * H + h) * D + d)],
              flashcpu_oracle_load_quantized(&src, nullptr, 0, s, h, d)))
              << s << " " << h << " " << d;
  }
}

// Quantizes x [1, S, H, D] with per-token scales (Q8_0: its blocks) and
// returns the dequantized values.
std::vector<float> RoundTrip(flashcpu_context *ctx, flashcpu_dtype dtype,
                             const std::vector<float> &x, int64_t S, int64_t H,
                             int64_t D, std::vector<float> *scales,
                             std::vector<float> *zeros) {
  const size_t bytes = dtype == Q8_0 ? x.size() / 32 * 34 : x.size();
  std::vector<unsigned char> codes(bytes);
  scales->assign(static_cast<size_t>(S * H), -1.0f);
  zeros->assign(scales->size(), -1.0f);
  flashcpu_kv_scales view{scales->data(),
                          F32,
                          {S * H, H, 1, 0},
                          dtype == U8 ? zeros->data() : nullptr};
  const flashcpu_kv_scales *use = dtype == Q8_0 ? nullptr : &view;
  const flashcpu_tensor src =
      flashcpu_tensor_bshd(const_cast<float *>(x.data()), F32, 1, S, H, D);
  const flashcpu_tensor q =
      flashcpu_tensor_bshd(codes.data(), dtype, 1, S, H, D);
  EXPECT_EQ(flashcpu_quantize(ctx, &src, &q, use), FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  std::vector<float> back(x.size());
  const flashcpu_tensor dst =
      flashcpu_tensor_bshd(back.data(), F32, 1, S, H, D);
  EXPECT_EQ(flashcpu_dequantize(ctx, &q, use, &dst), FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  return back;
}

TEST(Quantize, PerTokenScalesRoundToTheNearestCode) {
  flashcpu_context *ctx = IsaContexts().back();
  constexpr int64_t S = 11, H = 2, D = 64;
  std::vector<float> x(static_cast<size_t>(S * H * D));
  Rng rng(11);
  for (float &value : x) value = static_cast<float>(rng.Uniform(-3.0, 5.0));
  x[70] = NAN; // row (0, 1) reads as NaN
  for (flashcpu_dtype dtype : {I8, U8, E4M3, E5M2, Q8_0}) {
    std::vector<float> scales, zeros;
    const std::vector<float> back =
        RoundTrip(ctx, dtype, x, S, H, D, &scales, &zeros);
    for (int64_t row = 0; row < S * H; row++) {
      double largest = 0.0, low = INFINITY, high = -INFINITY;
      for (int64_t d = 0; d < D; d++) {
        const double value = x[static_cast<size_t>(row * D + d)];
        // Comparisons, not fmin/fmax: gcc 12 for aarch64 crashes vectorizing
        // three fmin/fmax reductions in one loop. NaN is skipped either way.
        if (std::fabs(value) > largest) largest = std::fabs(value);
        if (value < low) low = value;
        if (value > high) high = value;
      }
      for (int64_t d = 0; d < D; d++) {
        const size_t e = static_cast<size_t>(row * D + d);
        if (row == 1 && dtype != Q8_0) {
          EXPECT_TRUE(std::isnan(back[e])) << flashcpu_dtype_name(dtype);
          continue;
        }
        if (row == 1 && d < 32) { // the NaN's block
          EXPECT_TRUE(std::isnan(back[e]));
          continue;
        }
        double bound; // half a step of the code grid, plus f32 rounding
        if (dtype == I8)
          bound = scales[static_cast<size_t>(row)] / 2;
        else if (dtype == U8)
          bound = scales[static_cast<size_t>(row)] / 2 + 1e-6 * (high - low);
        else if (dtype == E4M3)
          bound = std::fabs(x[e]) * std::ldexp(1.0, -4) +
                  largest / 448 * std::ldexp(1.0, -10);
        else if (dtype == E5M2)
          bound = std::fabs(x[e]) * std::ldexp(1.0, -3) +
                  largest / 57344 * std::ldexp(1.0, -17);
        else {
          double block = 0.0;
          for (int64_t i = d / 32 * 32; i < d / 32 * 32 + 32; i++)
            if (std::fabs(x[static_cast<size_t>(row * D + i)]) > block)
              block = std::fabs(x[static_cast<size_t>(row * D + i)]);
          bound = block / 127 * 0.5 * (1 + 1e-3);
        }
        EXPECT_LE(std::fabs(back[e] - x[e]), bound * (1 + 1e-6))
            << flashcpu_dtype_name(dtype) << " row " << row << " d " << d
            << ": " << x[e] << " -> " << back[e];
      }
      if (dtype == I8 && row != 1) {
        EXPECT_EQ(scales[static_cast<size_t>(row)],
                  static_cast<float>(largest) / 127.0f);
      }
    }
  }
}

// Half a step of the code grid at x for a row of scale s: what rounding x
// to its nearest code may cost (U8: plus the zero point's own rounding).
double HalfAStep(flashcpu_dtype dtype, double x, double scale,
                 double zero_error) {
  switch (dtype) {
  case I8:
    return scale / 2;
  case U8:
    return scale * (0.5 + zero_error);
  case E4M3:
    return std::fabs(x) * std::ldexp(1.0, -4) + scale * std::ldexp(1.0, -10);
  default:
    return std::fabs(x) * std::ldexp(1.0, -3) + scale * std::ldexp(1.0, -17);
  }
}

// A row of tiny values has a tiny scale: to nearest in its dtype it may
// round to 0 (the row read back as zeros, or NaN for U8), or to a
// subnormal so far below the exact scale that the row's largest codes
// saturate. The scale stored is then the next value up, and every value
// reads back to within half a step of its code grid.
TEST(Quantize, TinyRowsKeepAScaleThatHoldsThem) {
  flashcpu_context *ctx = IsaContexts().back();
  constexpr int64_t S = 4, H = 2, D = 32;
  struct Case {
    flashcpu_dtype scale_dtype;
    double largest; // of the first row; each next row's is 1/8 larger
  };
  // f16: 1e-7 and 1e-6 round to 0 (I8, U8, E4M3); the next three give
  // subnormal scales near 1.4 x 2^-24 for I8 / U8, E4M3 and E5M2.
  const Case cases[] = {
      {FLASHCPU_DTYPE_F16, 1e-7},    {FLASHCPU_DTYPE_F16, 1e-6},
      {FLASHCPU_DTYPE_F16, 1.06e-5}, {FLASHCPU_DTYPE_F16, 3.7e-5},
      {FLASHCPU_DTYPE_F16, 4.8e-3},  {FLASHCPU_DTYPE_BF16, 1e-38},
      {FLASHCPU_DTYPE_BF16, 2e-37},  {F32, 1e-43}};
  for (const Case &c : cases)
    for (flashcpu_dtype dtype : {I8, U8, E4M3, E5M2}) {
      std::vector<float> x(static_cast<size_t>(S * H * D));
      Rng rng(17);
      for (int64_t row = 0; row < S * H; row++) {
        const double largest =
            c.largest * (1.0 + 0.125 * static_cast<double>(row));
        for (int64_t d = 0; d < D; d++)
          x[static_cast<size_t>(row * D + d)] =
              static_cast<float>(d == 0   ? largest
                                 : d == 1 ? -largest / 2
                                          : rng.Uniform(-largest, largest));
      }
      const size_t size = ElementBytes(c.scale_dtype);
      std::vector<unsigned char> codes(x.size()),
          scales(static_cast<size_t>(S * H) * size), zeros(scales.size());
      flashcpu_kv_scales view{scales.data(),
                              c.scale_dtype,
                              {S * H, H, 1, 0},
                              dtype == U8 ? zeros.data() : nullptr};
      const flashcpu_tensor src =
          flashcpu_tensor_bshd(x.data(), F32, 1, S, H, D);
      const flashcpu_tensor q =
          flashcpu_tensor_bshd(codes.data(), dtype, 1, S, H, D);
      ASSERT_EQ(flashcpu_quantize(ctx, &src, &q, &view), FLASHCPU_OK)
          << flashcpu_last_error(ctx);
      std::vector<float> back(x.size());
      const flashcpu_tensor dst =
          flashcpu_tensor_bshd(back.data(), F32, 1, S, H, D);
      ASSERT_EQ(flashcpu_dequantize(ctx, &q, &view, &dst), FLASHCPU_OK)
          << flashcpu_last_error(ctx);
      char what[96];
      std::snprintf(what, sizeof what, "%s with %s scales, largest %g",
                    flashcpu_dtype_name(dtype),
                    flashcpu_dtype_name(c.scale_dtype), c.largest);
      for (int64_t row = 0; row < S * H; row++) {
        const double scale =
            LoadAs(&scales[static_cast<size_t>(row) * size], c.scale_dtype);
        double zero_error = 0.0;
        if (dtype == U8) {
          double low = INFINITY;
          for (int64_t d = 0; d < D; d++)
            low = std::min(
                low, static_cast<double>(x[static_cast<size_t>(row * D + d)]));
          zero_error = std::fabs(
              LoadAs(&zeros[static_cast<size_t>(row) * size], c.scale_dtype) +
              low / scale);
        }
        for (int64_t d = 0; d < D; d++) {
          const size_t e = static_cast<size_t>(row * D + d);
          // f32 rounding of the value read, down to f32's subnormal steps
          const double bound =
              HalfAStep(dtype, x[e], scale, zero_error) * (1 + 1e-6) + 0x1p-149;
          if (!(std::fabs(back[e] - x[e]) <= bound)) {
            ADD_FAILURE() << what << ", row " << row << ", d " << d << ": "
                          << x[e] << " -> " << back[e] << " with scale "
                          << scale;
            row = S * H; // one failure per case
            break;
          }
        }
      }
    }
}

// Q8_0's block scale d is f16: a block of tiny values keeps a d that
// holds it too (not 0, nor a subnormal that saturates the codes).
TEST(Quantize, TinyQ8_0BlocksKeepAScaleThatHoldsThem) {
  flashcpu_context *ctx = IsaContexts().back();
  for (double largest : {1e-7, 1e-6, 1.06e-5}) {
    std::vector<float> x(64);
    Rng rng(5);
    for (size_t i = 0; i < x.size(); i++)
      x[i] = static_cast<float>(
          i % 32 == 0 ? largest * (1.0 + 0.2 * static_cast<double>(i / 32))
                      : rng.Uniform(-largest, largest));
    std::vector<unsigned char> blocks(68);
    std::vector<float> back(x.size());
    const flashcpu_tensor src =
        flashcpu_tensor_bshd(x.data(), F32, 1, 1, 1, 64);
    const flashcpu_tensor q =
        flashcpu_tensor_bshd(blocks.data(), Q8_0, 1, 1, 1, 64);
    const flashcpu_tensor dst =
        flashcpu_tensor_bshd(back.data(), F32, 1, 1, 1, 64);
    ASSERT_EQ(flashcpu_quantize(ctx, &src, &q, nullptr), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    ASSERT_EQ(flashcpu_dequantize(ctx, &q, nullptr, &dst), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    for (size_t i = 0; i < x.size(); i++) {
      uint16_t half;
      std::memcpy(&half, &blocks[i / 32 * 34], 2);
      const double d = DecodeHalf(half);
      ASSERT_GT(d, 0.0) << largest;
      ASSERT_LE(std::fabs(back[i] - x[i]), d / 2 * (1 + 1e-6))
          << largest << " [" << i << "]: " << x[i] << " -> " << back[i]
          << " with d " << d;
    }
  }
}

// U8 rows whose max equals their min, with computed scales: a row of zeros
// stores scale 1 and zero point 0; a constant c stores scale |c| / 255
// and zero point -c / scale (-255 for c > 0, 255 for c < 0), so its codes
// are 0 and it reads back as c (to within the rounding of scale and zero
// point in their dtype).
TEST(Quantize, U8ConstantRowsStoreTheirMagnitudeOver255) {
  flashcpu_context *ctx = IsaContexts().back();
  constexpr int64_t S = 5, D = 32;
  const float constants[S] = {0.0f, 3.5f, -0.25f, 1000.0f, 1e-7f};
  std::vector<float> x(static_cast<size_t>(S * D));
  for (int64_t s = 0; s < S; s++)
    for (int64_t d = 0; d < D; d++)
      x[static_cast<size_t>(s * D + d)] = constants[s];
  for (flashcpu_dtype scale_dtype : {F32, FLASHCPU_DTYPE_F16}) {
    const size_t size = ElementBytes(scale_dtype);
    std::vector<unsigned char> codes(x.size(), 0x5a), scales(S * size),
        zeros(S * size);
    std::vector<float> back(x.size());
    flashcpu_kv_scales view{
        scales.data(), scale_dtype, {S, 1, 1, 0}, zeros.data()};
    const flashcpu_tensor src = flashcpu_tensor_bshd(x.data(), F32, 1, S, 1, D);
    const flashcpu_tensor q =
        flashcpu_tensor_bshd(codes.data(), U8, 1, S, 1, D);
    const flashcpu_tensor dst =
        flashcpu_tensor_bshd(back.data(), F32, 1, S, 1, D);
    ASSERT_EQ(flashcpu_quantize(ctx, &src, &q, &view), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    ASSERT_EQ(flashcpu_dequantize(ctx, &q, &view, &dst), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    for (int64_t s = 0; s < S; s++) {
      const double c = constants[s],
                   scale = LoadAs(&scales[static_cast<size_t>(s) * size],
                                  scale_dtype),
                   zero = LoadAs(&zeros[static_cast<size_t>(s) * size],
                                 scale_dtype);
      const char *name = flashcpu_dtype_name(scale_dtype);
      if (c == 0) {
        EXPECT_EQ(scale, 1.0) << name;
        EXPECT_EQ(zero, 0.0) << name;
      } else {
        // |c| / 255 in f32, then rounded to the scales' dtype; where that
        // is 0 (1e-7 in f16), the dtype's smallest value above 0
        double expected =
            RoundToDtype(std::fabs(constants[s]) / 255.0f, scale_dtype);
        if (expected == 0) expected = UlpOf(scale_dtype, 0.0);
        EXPECT_EQ(scale, expected) << name << " " << c;
        EXPECT_EQ(zero,
                  RoundToDtype(static_cast<float>(-c / scale), scale_dtype))
            << name << " " << c;
        if (expected ==
            RoundToDtype(std::fabs(constants[s]) / 255.0f, scale_dtype)) {
          EXPECT_NEAR(zero, c > 0 ? -255.0 : 255.0, 0.125) << name << " " << c;
        }
      }
      for (int64_t d = 0; d < D; d++) {
        const size_t e = static_cast<size_t>(s * D + d);
        EXPECT_EQ(codes[e], 0) << name << " " << c;
        EXPECT_NEAR(back[e], c, std::fabs(c) * 2e-3) << name << " " << c;
      }
    }
  }
}

TEST(Quantize, ReadScalesSaturate) {
  flashcpu_context *ctx = IsaContexts().back();
  const float x[32] = {1000.0f, -1000.0f, 0.5f, 1e30f, -1e30f, 3.0f};
  float scale = 0.01f;
  flashcpu_kv_scales view{&scale, F32, {0, 0, 0, 0}, nullptr};
  const flashcpu_tensor src =
      flashcpu_tensor_bshd(const_cast<float *>(x), F32, 1, 1, 1, 32);
  for (flashcpu_dtype dtype : {I8, E4M3, E5M2}) {
    unsigned char codes[32];
    const flashcpu_tensor q = flashcpu_tensor_bshd(codes, dtype, 1, 1, 1, 32);
    ASSERT_EQ(flashcpu_quantize(ctx, &src, &q, &view), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    const double largest = dtype == I8     ? 127.0
                           : dtype == E4M3 ? 448.0
                                           : 57344.0;
    EXPECT_EQ(flashcpu_oracle_load_quantized(&q, nullptr, 0, 0, 0, 0),
              dtype == I8                ? 127.0
              : 1000.0 / 0.01f > largest ? largest
                                         : 100000.0);
    EXPECT_EQ(flashcpu_oracle_load_quantized(&q, nullptr, 0, 0, 0, 3), largest)
        << flashcpu_dtype_name(dtype);
    EXPECT_EQ(flashcpu_oracle_load_quantized(&q, nullptr, 0, 0, 0, 4), -largest)
        << flashcpu_dtype_name(dtype);
  }
}

TEST(QuantizeErrors, NothingWrittenOnError) {
  flashcpu_context *ctx = IsaContexts().back();
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = static_cast<float>(i) - 20.0f;
  unsigned char codes[64];
  const flashcpu_tensor src = flashcpu_tensor_bshd(x, F32, 1, 2, 1, 32);
  float scale = 0.5f, zero_scale = 0.0f, zero_points[2] = {1, 2};
  struct Case {
    const char *what;
    flashcpu_dtype dtype;
    flashcpu_kv_scales scales;
    bool with_scales;
    flashcpu_status status;
    const char *message;
  } cases[] = {
      {"a float dst",
       F32,
       {},
       false,
       FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
       "must be quantized"},
      {"scales for Q8_0",
       Q8_0,
       {&scale, F32, {0, 0, 0, 0}, nullptr},
       true,
       FLASHCPU_ERROR_INVALID_ARGUMENT,
       "Q8_0"},
      {"zero points for I8",
       I8,
       {&scale, F32, {0, 0, 0, 0}, zero_points},
       true,
       FLASHCPU_ERROR_INVALID_ARGUMENT,
       "zero points"},
      {"a zero scale",
       I8,
       {&zero_scale, F32, {0, 0, 0, 0}, nullptr},
       true,
       FLASHCPU_ERROR_INVALID_ARGUMENT,
       "scale"},
      {"scales of an odd dtype",
       I8,
       {&scale, I8, {0, 0, 0, 0}, nullptr},
       true,
       FLASHCPU_ERROR_UNSUPPORTED_DTYPE,
       "f32, f16 or bf16"},
      {"negative scale strides",
       I8,
       {&scale, F32, {0, -1, 0, 0}, nullptr},
       true,
       FLASHCPU_ERROR_BAD_LAYOUT,
       "non-negative"},
      {"U8 per token without zero points",
       U8,
       {zero_points, F32, {2, 1, 1, 0}, nullptr},
       true,
       FLASHCPU_ERROR_INVALID_ARGUMENT,
       "zero_points"},
  };
  for (const Case &c : cases) {
    std::memset(codes, 0x5a, sizeof codes);
    const flashcpu_tensor q = flashcpu_tensor_bshd(codes, c.dtype, 1, 2, 1, 32);
    const flashcpu_kv_scales *use = c.with_scales ? &c.scales : nullptr;
    EXPECT_EQ(flashcpu_quantize(ctx, &src, &q, use), c.status) << c.what;
    EXPECT_NE(std::string(flashcpu_last_error(ctx)).find(c.message),
              std::string::npos)
        << c.what << ": " << flashcpu_last_error(ctx);
    for (unsigned char byte : codes) ASSERT_EQ(byte, 0x5a) << c.what;
  }
  // NaN cannot be held by I8 with a read scale: refused before writing.
  x[40] = NAN;
  std::memset(codes, 0x5a, sizeof codes);
  flashcpu_kv_scales read{&scale, F32, {0, 0, 0, 0}, nullptr};
  const flashcpu_tensor q = flashcpu_tensor_bshd(codes, I8, 1, 2, 1, 32);
  EXPECT_EQ(flashcpu_quantize(ctx, &src, &q, &read),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(ctx)).find("src[0, 1, 0, 8]"),
            std::string::npos)
      << flashcpu_last_error(ctx);
  for (unsigned char byte : codes) ASSERT_EQ(byte, 0x5a);
  // Q8_0 layouts are whole blocks.
  unsigned char blocks[3 * 34];
  flashcpu_tensor odd = flashcpu_tensor_bshd(blocks, Q8_0, 1, 1, 1, 48);
  const flashcpu_tensor src48 = flashcpu_tensor_bshd(x, F32, 1, 1, 1, 48);
  EXPECT_EQ(flashcpu_quantize(ctx, &src48, &odd, nullptr),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(ctx)).find("whole blocks"),
            std::string::npos);
}

// A tensor with no elements is valid, whatever its strides (numpy's for an
// empty [2, 0, 1, 80] array repeat 80): both calls return OK and write
// nothing, neither codes nor scales.
TEST(QuantizeEmpty, NoElementsIsOkAndWritesNothing) {
  flashcpu_context *ctx = IsaContexts().back();
  constexpr unsigned char kPoison = 0x5a;
  std::vector<unsigned char> codes(256, kPoison), values(1024, kPoison),
      scales(64, kPoison), zeros(64, kPoison);
  const int64_t numpy_strides[4] = {80, 80, 80, 1};
  for (flashcpu_dtype dtype : {I8, U8, E4M3}) {
    flashcpu_tensor quantized =
        flashcpu_tensor_bshd(codes.data(), dtype, 2, 0, 1, 80);
    flashcpu_tensor floats =
        flashcpu_tensor_bshd(values.data(), F32, 2, 0, 1, 80);
    std::memcpy(quantized.strides, numpy_strides, sizeof quantized.strides);
    std::memcpy(floats.strides, numpy_strides, sizeof floats.strides);
    // No scales, and per-token scales (computed, so written when there are
    // rows).
    flashcpu_kv_scales per_token{
        scales.data(), F32, {0, 1, 1, 0}, dtype == U8 ? zeros.data() : nullptr};
    for (const flashcpu_kv_scales *view :
         {static_cast<const flashcpu_kv_scales *>(nullptr),
          static_cast<const flashcpu_kv_scales *>(&per_token)}) {
      EXPECT_EQ(flashcpu_dequantize(ctx, &quantized, view, &floats),
                FLASHCPU_OK)
          << flashcpu_dtype_name(dtype) << ": " << flashcpu_last_error(ctx);
      EXPECT_EQ(flashcpu_quantize(ctx, &floats, &quantized, view), FLASHCPU_OK)
          << flashcpu_dtype_name(dtype) << ": " << flashcpu_last_error(ctx);
    }
  }
  for (const std::vector<unsigned char> *buffer :
       {&codes, &values, &scales, &zeros})
    for (unsigned char byte : *buffer) ASSERT_EQ(byte, kPoison);
  // Empty, yet still checked: a float dst is refused.
  flashcpu_tensor floats =
      flashcpu_tensor_bshd(values.data(), F32, 2, 0, 1, 80);
  std::memcpy(floats.strides, numpy_strides, sizeof floats.strides);
  EXPECT_EQ(flashcpu_quantize(ctx, &floats, &floats, nullptr),
            FLASHCPU_ERROR_UNSUPPORTED_DTYPE);
}

TEST(QuantizeErrors, QuantizedQAndScalesOfAFloatKAreRefused) {
  flashcpu_context *ctx = IsaContexts().back();
  unsigned char q_codes[32] = {};
  float k[32] = {}, v[32] = {}, out[32];
  const flashcpu_tensor q = flashcpu_tensor_bshd(q_codes, I8, 1, 1, 1, 32);
  const flashcpu_tensor kt = flashcpu_tensor_bshd(k, F32, 1, 1, 1, 32);
  const flashcpu_tensor vt = flashcpu_tensor_bshd(v, F32, 1, 1, 1, 32);
  const flashcpu_tensor ot = flashcpu_tensor_bshd(out, F32, 1, 1, 1, 32);
  EXPECT_EQ(flashcpu_attention(ctx, &q, &kt, &vt, &ot, nullptr, nullptr),
            FLASHCPU_ERROR_UNSUPPORTED_DTYPE);
  EXPECT_NE(std::string(flashcpu_last_error(ctx)).find("K and V only"),
            std::string::npos);
  const flashcpu_tensor qf = flashcpu_tensor_bshd(k, F32, 1, 1, 1, 32);
  float scale = 1.0f;
  flashcpu_kv_scales scales{&scale, F32, {0, 0, 0, 0}, nullptr};
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.k_scales = &scales;
  EXPECT_EQ(flashcpu_attention(ctx, &qf, &kt, &vt, &ot, nullptr, &params),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(ctx)).find("f32 tensor"),
            std::string::npos)
      << flashcpu_last_error(ctx);
  // out may not overlap the scales (an input).
  unsigned char k_codes[32] = {};
  const flashcpu_tensor kq = flashcpu_tensor_bshd(k_codes, I8, 1, 1, 1, 32);
  flashcpu_kv_scales inside{out + 3, F32, {0, 0, 0, 0}, nullptr};
  params.k_scales = &inside;
  EXPECT_EQ(flashcpu_attention(ctx, &qf, &kq, &vt, &ot, nullptr, &params),
            FLASHCPU_ERROR_OVERLAP);
}

TEST(QuantizedPages, AppendThenAttentionMatchesTheContiguousCache) {
  constexpr int64_t S = 45, Hq = 4, H = 2, D = 64, page = 8, pages = 8;
  for (flashcpu_dtype dtype : {I8, U8, E4M3, Q8_0}) {
    flashcpu_context *ctx = IsaContexts().back();
    Rng rng(static_cast<uint64_t>(dtype) + 5);
    std::vector<float> k(static_cast<size_t>(S * H * D)), v(k.size()),
        q(static_cast<size_t>(Hq * D));
    for (float &x : k) x = static_cast<float>(rng.Uniform(-2, 2));
    for (float &x : v) x = static_cast<float>(rng.Uniform(-2, 2));
    for (float &x : q) x = static_cast<float>(rng.Uniform(-1, 1));
    const size_t row_bytes = dtype == Q8_0 ? D / 32 * 34 : D;
    // Contiguous: flashcpu_quantize with per-token scales.
    std::vector<unsigned char> kc(static_cast<size_t>(S * H) * row_bytes),
        vc(kc.size());
    std::vector<float> ks(static_cast<size_t>(S * H)), vs(ks.size()),
        kz(ks.size()), vz(ks.size());
    const bool scaled = dtype != Q8_0, zeros = dtype == U8;
    flashcpu_kv_scales k_view{
        ks.data(), F32, {S * H, H, 1, 0}, zeros ? kz.data() : nullptr};
    flashcpu_kv_scales v_view{
        vs.data(), F32, {S * H, H, 1, 0}, zeros ? vz.data() : nullptr};
    const flashcpu_tensor ksrc =
        flashcpu_tensor_bshd(k.data(), F32, 1, S, H, D);
    const flashcpu_tensor vsrc =
        flashcpu_tensor_bshd(v.data(), F32, 1, S, H, D);
    const flashcpu_tensor kq =
        flashcpu_tensor_bshd(kc.data(), dtype, 1, S, H, D);
    const flashcpu_tensor vq =
        flashcpu_tensor_bshd(vc.data(), dtype, 1, S, H, D);
    ASSERT_EQ(flashcpu_quantize(ctx, &ksrc, &kq, scaled ? &k_view : nullptr),
              FLASHCPU_OK);
    ASSERT_EQ(flashcpu_quantize(ctx, &vsrc, &vq, scaled ? &v_view : nullptr),
              FLASHCPU_OK);
    // Paged: pages in reverse order, filled by kv_append in two steps.
    std::vector<unsigned char> kp(
        static_cast<size_t>(pages * page * H) * row_bytes, 0x5a),
        vp(kp);
    std::vector<float> kps(static_cast<size_t>(pages * page * H), -1), vps(kps),
        kpz(kps), vpz(kps);
    flashcpu_paged_kv cache =
        flashcpu_paged_kv_nhd(kp.data(), vp.data(), dtype, pages, page, H, D);
    flashcpu_kv_scales kp_view{
        kps.data(), F32, {page * H, H, 1, 0}, zeros ? kpz.data() : nullptr};
    flashcpu_kv_scales vp_view{
        vps.data(), F32, {page * H, H, 1, 0}, zeros ? vpz.data() : nullptr};
    if (scaled) {
      cache.k_scales = &kp_view;
      cache.v_scales = &vp_view;
    }
    std::vector<int32_t> table(static_cast<size_t>(pages));
    for (int64_t p = 0; p < pages; p++)
      table[static_cast<size_t>(p)] = static_cast<int32_t>(pages - 1 - p);
    std::vector<int64_t> slots(static_cast<size_t>(S));
    for (int64_t j = 0; j < S; j++)
      slots[static_cast<size_t>(j)] =
          table[static_cast<size_t>(j / page)] * page + j % page;
    for (int64_t begin : {int64_t{0}, int64_t{30}}) {
      const int64_t count = begin == 0 ? 30 : S - 30;
      flashcpu_tensor kn =
          flashcpu_tensor_bshd(k.data() + begin * H * D, F32, 1, count, H, D);
      flashcpu_tensor vn =
          flashcpu_tensor_bshd(v.data() + begin * H * D, F32, 1, count, H, D);
      ASSERT_EQ(flashcpu_kv_append(ctx, &kn, &vn, slots.data() + begin, &cache),
                FLASHCPU_OK)
          << flashcpu_last_error(ctx);
    }
    for (int64_t j = 0; j < S; j++)
      for (int64_t h = 0; h < H; h++) {
        const size_t at =
            static_cast<size_t>((slots[static_cast<size_t>(j)] * H + h)) *
            row_bytes;
        ASSERT_EQ(std::memcmp(&kp[at],
                              &kc[static_cast<size_t>(j * H + h) * row_bytes],
                              row_bytes),
                  0)
            << j;
        ASSERT_EQ(std::memcmp(&vp[at],
                              &vc[static_cast<size_t>(j * H + h) * row_bytes],
                              row_bytes),
                  0)
            << j;
        if (scaled) {
          ASSERT_EQ(
              kps[static_cast<size_t>(slots[static_cast<size_t>(j)] * H + h)],
              ks[static_cast<size_t>(j * H + h)]);
        }
      }
    // Attention: contiguous vs paged, one decode row.
    std::vector<float> out_c(static_cast<size_t>(Hq * D), NAN), out_p(out_c);
    const flashcpu_tensor qt = flashcpu_tensor_bshd(q.data(), F32, 1, 1, Hq, D);
    const flashcpu_tensor oc =
        flashcpu_tensor_bshd(out_c.data(), F32, 1, 1, Hq, D);
    const flashcpu_tensor op =
        flashcpu_tensor_bshd(out_p.data(), F32, 1, 1, Hq, D);
    flashcpu_attention_params params;
    flashcpu_attention_params_init(&params);
    params.k_scales = scaled ? &k_view : nullptr;
    params.v_scales = scaled ? &v_view : nullptr;
    ASSERT_EQ(flashcpu_attention(ctx, &qt, &kq, &vq, &oc, nullptr, &params),
              FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    flashcpu_batch batch;
    flashcpu_batch_init(&batch);
    const int32_t cu[2] = {0, 1}, lens[1] = {static_cast<int32_t>(S)};
    batch.num_requests = 1;
    batch.cu_seqlens_q = cu;
    batch.seq_lens_kv = lens;
    batch.block_table = table.data();
    batch.block_table_stride = pages;
    flashcpu_plan *plan = nullptr;
    ASSERT_EQ(
        flashcpu_plan_create(ctx, &batch, Hq, F32, op.dtype, &cache, &plan),
        FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    EXPECT_EQ(
        flashcpu_attention_paged(ctx, plan, &qt, &cache, &op, nullptr, nullptr),
        FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    flashcpu_plan_destroy(plan);
    EXPECT_EQ(
        std::memcmp(out_c.data(), out_p.data(), out_c.size() * sizeof(float)),
        0)
        << flashcpu_dtype_name(dtype);
  }
}

} // namespace
} // namespace fctest
