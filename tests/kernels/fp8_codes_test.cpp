// bf16 q against an F8_E4M3 or F8_E5M2 K on every registry kernel that
// takes it (the dot-product rows rebuild the codes as bf16 in registers),
// against a float64 reference over the dequantized cache
// (flashcpu_dequantize, itself checked against the oracle's decoding):
//  - every code: each key holds one code at element key % D and zeros
//    elsewhere, its per-token scale 1 / |value| (so each key's score is
//    +-q_d, or 0), and the softmax scale 4 makes a code read wrong by even
//    1% move the output by more than the bound;
//  - random data, per-head scales, head_dim 80 (a masked tail) and 128,
//    1 and 3 query rows;
//  - NaN codes reach exactly the batch that holds them, and E5M2's -inf
//    gives its key no weight.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "kernel_tester.h"
#include "test_tensor.h"

namespace fctest {
namespace {

constexpr int64_t kBatch = 2, kQHeads = 4; // one kv head: a chunk of 4 slots

struct Fp8Case {
  const char *name;
  flashcpu_dtype k;
  bool every_code;
  int64_t q_len, kv_len, head_dim;
};

const Fp8Case kCases[] = {
    {"e4m3_every_code", FLASHCPU_DTYPE_F8_E4M3, true, 1, 256, 32},
    {"e5m2_every_code", FLASHCPU_DTYPE_F8_E5M2, true, 1, 256, 32},
    {"e4m3_random_d128", FLASHCPU_DTYPE_F8_E4M3, false, 1, 300, 128},
    {"e5m2_random_d80_verify", FLASHCPU_DTYPE_F8_E5M2, false, 3, 201, 80},
    {"e4m3_random_d80_verify", FLASHCPU_DTYPE_F8_E4M3, false, 3, 77, 80},
};

bool IsSpecial(flashcpu_dtype dtype, int code) {
  return dtype == FLASHCPU_DTYPE_F8_E4M3 ? (code & 0x7f) == 0x7f
                                         : (code & 0x7c) == 0x7c;
}

// One call's inputs: bf16 q and V, fp8 K with per-token or per-head f32
// scales, and K's dequantized values.
struct Fp8Inputs {
  int64_t L = 0, S = 0, D = 0;
  flashcpu_dtype k_dtype = FLASHCPU_DTYPE_F8_E4M3;
  std::vector<uint16_t> q, v;
  std::vector<unsigned char> k;
  std::vector<float> scales, k_values;
  flashcpu_kv_scales scale_view{};
  float softmax_scale = 0.0f;

  void Make(flashcpu_context *context, const Fp8Case &c) {
    L = c.q_len;
    S = c.kv_len;
    D = c.head_dim;
    k_dtype = c.k;
    Rng rng(
        static_cast<uint64_t>(S * 977 + D * 13 + L + (c.every_code ? 5 : 0)));
    q.resize(static_cast<size_t>(kBatch * L * kQHeads * D));
    v.resize(static_cast<size_t>(kBatch * S * D));
    k.assign(static_cast<size_t>(kBatch * S * D), 0);
    for (size_t i = 0; i < q.size(); i++) {
      // every code: q_d = 1 + d / 64, exact in bf16, so each score is +-q_d
      const double x =
          c.every_code
              ? 1.0 + static_cast<double>(i % static_cast<size_t>(D)) / 64.0
              : rng.Uniform(-1.0, 1.0);
      StoreAs(&q[i], FLASHCPU_DTYPE_BF16, x);
    }
    for (uint16_t &x : v)
      StoreAs(&x, FLASHCPU_DTYPE_BF16, rng.Uniform(-1.0, 1.0));
    scale_view.dtype = FLASHCPU_DTYPE_F32;
    if (c.every_code) {
      softmax_scale = 4.0f;
      MakeEveryCode(context);
    } else {
      softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
      MakeRandom(context, rng);
    }
    Dequantize(context);
  }

  void MakeEveryCode(flashcpu_context *context) {
    // Each code's value, from a row of all 256 codes at scale 1.
    std::vector<unsigned char> all(256);
    std::vector<float> value(256);
    for (int i = 0; i < 256; i++)
      all[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
    const flashcpu_tensor codes =
        flashcpu_tensor_bshd(all.data(), k_dtype, 1, 1, 1, 256);
    flashcpu_tensor out =
        flashcpu_tensor_bshd(value.data(), FLASHCPU_DTYPE_F32, 1, 1, 1, 256);
    ASSERT_EQ(flashcpu_dequantize(context, &codes, nullptr, &out), FLASHCPU_OK)
        << flashcpu_last_error(context);
    // Batch 0 the positive codes, batch 1 the negative ones, so that the
    // scores of a batch are alike and every key weighs. A zero's scale is
    // 2^9: a zero read as anything else would dominate its batch.
    scales.assign(static_cast<size_t>(kBatch * S), 1.0f);
    for (int64_t b = 0; b < kBatch; b++)
      for (int64_t j = 0; j < S; j++) {
        const int code = static_cast<int>(b * 128 + j % 128);
        if (IsSpecial(k_dtype, code)) continue;
        k[static_cast<size_t>((b * S + j) * D + j % D)] =
            static_cast<unsigned char>(code);
        const float x = std::fabs(value[static_cast<size_t>(code)]);
        scales[static_cast<size_t>(b * S + j)] = x > 0.0f ? 1.0f / x : 512.0f;
      }
    const int64_t per_token[4] = {S, 1, 1, 0};
    std::memcpy(scale_view.strides, per_token, sizeof per_token);
    scale_view.data = scales.data();
  }

  void MakeRandom(flashcpu_context *context, Rng &rng) {
    std::vector<float> source(k.size());
    for (float &x : source) x = static_cast<float>(rng.Uniform(-2.0, 2.5));
    scales.assign(1, static_cast<float>(rng.Uniform(0.5, 2.0)) /
                         64.0f); // per head
    const int64_t per_head[4] = {0, 0, 1, 0};
    std::memcpy(scale_view.strides, per_head, sizeof per_head);
    scale_view.data = scales.data();
    const flashcpu_tensor src = flashcpu_tensor_bshd(
        source.data(), FLASHCPU_DTYPE_F32, kBatch, S, 1, D);
    const flashcpu_tensor dst = KView();
    ASSERT_EQ(flashcpu_quantize(context, &src, &dst, &scale_view), FLASHCPU_OK)
        << flashcpu_last_error(context);
  }

  void Dequantize(flashcpu_context *context) {
    k_values.assign(k.size(), 0.0f);
    const flashcpu_tensor codes = KView();
    flashcpu_tensor out = flashcpu_tensor_bshd(
        k_values.data(), FLASHCPU_DTYPE_F32, kBatch, S, 1, D);
    ASSERT_EQ(flashcpu_dequantize(context, &codes, &scale_view, &out),
              FLASHCPU_OK)
        << flashcpu_last_error(context);
  }

  flashcpu_tensor KView() {
    return flashcpu_tensor_bshd(k.data(), k_dtype, kBatch, S, 1, D);
  }

  // Runs the call into out (f32); the status as the library returned it.
  flashcpu_status Run(flashcpu_context *context, std::vector<float> *out) {
    out->assign(static_cast<size_t>(kBatch * L * kQHeads * D), NAN);
    const flashcpu_tensor qt = flashcpu_tensor_bshd(
        q.data(), FLASHCPU_DTYPE_BF16, kBatch, L, kQHeads, D);
    const flashcpu_tensor kt = KView();
    const flashcpu_tensor vt =
        flashcpu_tensor_bshd(v.data(), FLASHCPU_DTYPE_BF16, kBatch, S, 1, D);
    const flashcpu_tensor ot = flashcpu_tensor_bshd(
        out->data(), FLASHCPU_DTYPE_F32, kBatch, L, kQHeads, D);
    flashcpu_attention_params params;
    flashcpu_attention_params_init(&params);
    params.scale = softmax_scale;
    params.k_scales = &scale_view;
    return flashcpu_attention(context, &qt, &kt, &vt, &ot, nullptr, &params);
  }

  // The float64 reference over the dequantized K (scores saturated to
  // +-FLT_MAX as the library's are).
  std::vector<double> Reference() const {
    std::vector<double> out(static_cast<size_t>(kBatch * L * kQHeads * D));
    std::vector<double> score(static_cast<size_t>(S));
    for (int64_t b = 0; b < kBatch; b++)
      for (int64_t i = 0; i < L; i++)
        for (int64_t h = 0; h < kQHeads; h++) {
          const size_t row =
              static_cast<size_t>(((b * L + i) * kQHeads + h) * D);
          double top = -INFINITY;
          bool nan = false;
          for (int64_t j = 0; j < S; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; d++)
              dot += BitsToDouble(q[row + static_cast<size_t>(d)]) *
                     static_cast<double>(
                         k_values[static_cast<size_t>((b * S + j) * D + d)]);
            dot *= softmax_scale;
            if (std::isnan(dot)) nan = true;
            score[static_cast<size_t>(j)] =
                std::clamp(dot, -static_cast<double>(FLT_MAX),
                           static_cast<double>(FLT_MAX));
            top = std::max(top, score[static_cast<size_t>(j)]);
          }
          double total = 0.0;
          std::vector<double> acc(static_cast<size_t>(D), 0.0);
          for (int64_t j = 0; j < S; j++) {
            const double w = std::exp(score[static_cast<size_t>(j)] - top);
            total += w;
            for (int64_t d = 0; d < D; d++)
              acc[static_cast<size_t>(d)] +=
                  w * BitsToDouble(v[static_cast<size_t>((b * S + j) * D + d)]);
          }
          for (int64_t d = 0; d < D; d++)
            out[row + static_cast<size_t>(d)] =
                nan ? NAN : acc[static_cast<size_t>(d)] / total;
        }
    return out;
  }

  static double BitsToDouble(uint16_t bits) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &wide, sizeof x);
    return x;
  }
};

bool CannotTake(flashcpu_status status, flashcpu_context *context) {
  return status == FLASHCPU_ERROR_INVALID_ARGUMENT &&
         std::string(flashcpu_last_error(context)).find("cannot take") !=
             std::string::npos;
}

// |kernel - reference| allowed: f32 sums of up to 128 exact products and a
// 300-key softmax stay well within 2e-4 of outputs bounded by 1 (every
// code: one product per score, 4e-5); a kernel that rounds P to bf16 moves
// an output by up to 2^-8 more.
double Bound(Kernel kernel, const Fp8Case &c) {
  const double f32 = c.every_code ? 4e-5 : 2e-4;
  return f32 +
         (kernel->weights == FLASHCPU_DTYPE_BF16 ? std::ldexp(1.0, -8) : 0.0);
}

using Fp8CodesSuite = KernelSuite<Fp8Case>;

// Runs in on the kernel against the reference: NaN exactly where the
// reference has it, elsewhere within the bound.
void ExpectTheReference(Kernel kernel, flashcpu_context *context,
                        const Fp8Case &c, Fp8Inputs *in, std::string *skip) {
  std::vector<float> out;
  const flashcpu_status status = in->Run(context, &out);
  if (CannotTake(status, context)) {
    *skip = flashcpu_last_error(context);
    return;
  }
  ASSERT_EQ(status, FLASHCPU_OK) << flashcpu_last_error(context);
  const std::vector<double> want = in->Reference();
  const double bound = Bound(kernel, c);
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < out.size(); i++) {
    ASSERT_EQ(std::isnan(out[i]), std::isnan(want[i]))
        << "element " << i << ": " << out[i] << " against " << want[i];
    if (std::isnan(want[i])) continue;
    const double error = std::fabs(static_cast<double>(out[i]) - want[i]);
    if (error > worst) {
      worst = error;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, bound) << "element " << worst_at << ": " << out[worst_at]
                          << " against " << want[worst_at];
}

TEST_P(Fp8CodesSuite, MatchesTheReference) {
  flashcpu_context *context = ctx();
  ASSERT_NE(context, nullptr);
  Fp8Inputs in;
  in.Make(context, test_case());
  if (HasFatalFailure()) return;
  std::string skip;
  ExpectTheReference(kernel(), context, test_case(), &in, &skip);
  if (!skip.empty())
    GTEST_SKIP() << kernel()->name << " does not take it: " << skip;
}

TEST_P(Fp8CodesSuite, SpecialCodesReachTheirBatchOnly) {
  const Fp8Case &c = test_case();
  if (c.every_code) GTEST_SKIP() << "the random cases carry the special codes";
  flashcpu_context *context = ctx();
  ASSERT_NE(context, nullptr);
  Fp8Inputs in;
  in.Make(context, c);
  if (HasFatalFailure()) return;
  const bool e4m3 = c.k == FLASHCPU_DTYPE_F8_E4M3;
  // Batch 1, key S / 2: a NaN code. E5M2, batch 0, key 5, element 1: -inf
  // times q's positive element gives that key's scores -inf (no weight).
  in.k[static_cast<size_t>((1 * in.S + in.S / 2) * in.D + 2)] =
      e4m3 ? 0xff : 0x7e;
  if (!e4m3) {
    in.k[static_cast<size_t>(5 * in.D + 1)] = 0xfc;
    for (int64_t r = 0; r < in.L * kQHeads; r++)
      StoreAs(&in.q[static_cast<size_t>(r * in.D + 1)], FLASHCPU_DTYPE_BF16,
              0.75);
  }
  in.Dequantize(context);
  if (HasFatalFailure()) return;
  std::string skip;
  ExpectTheReference(kernel(), context, c, &in, &skip);
  if (!skip.empty())
    GTEST_SKIP() << kernel()->name << " does not take it: " << skip;
}

INSTANTIATE_TEST_SUITE_P(Kernels, Fp8CodesSuite,
                         testing::ValuesIn(ForEveryKernel(std::vector<Fp8Case>(
                             std::begin(kCases), std::end(kCases)))),
                         KernelParamName<Fp8Case>([](const Fp8Case &c) {
                           return std::string(c.name);
                         }));

} // namespace
} // namespace fctest
