// Quantized K/V on every registry kernel: attention over I8, U8, F8_E4M3,
// F8_E5M2 and Q8_0 caches (scales per token, per head, per tensor, per
// channel; zero points) must write the very bytes the same kernel writes
// for the dequantized f32 K/V (flashcpu_dequantize, itself checked
// against the oracle's decoding in tests/api/quantize_test.cpp), the f32
// path being checked against the oracle by the other suites. The same for
// the paged path, with the cache written by flashcpu_kv_append. Kernels
// whose scores round q to integers (and whose values round the weights to
// integers where V is I8 or U8) are held to a bound on that rounding
// against the exact kernel of their ISA instead, and the F8 kernel (each
// key's scale after its dot products) to f32 rounding of it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_tester.h"

namespace fctest {
namespace {

enum class Scales { kNone, kPerToken, kPerHead, kPerTensor, kPerChannel };

struct QuantCase {
  const char *name;
  flashcpu_dtype k, v;
  Scales k_scales, v_scales;
  bool zero_points;
  int64_t q_len, kv_len, head_dim;
};

const QuantCase kCases[] = {
    {"i8_token_decode", FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_I8, Scales::kPerToken,
     Scales::kPerToken, false, 1, 300, 128},
    {"i8_token_verify", FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_I8, Scales::kPerToken,
     Scales::kPerToken, false, 5, 77, 72},
    {"i8_token_prefill", FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_I8,
     Scales::kPerToken, Scales::kPerToken, false, 37, 101, 64},
    {"u8_zero_decode", FLASHCPU_DTYPE_U8, FLASHCPU_DTYPE_U8, Scales::kPerToken,
     Scales::kPerToken, true, 1, 130, 64},
    {"u8_zero_prefill", FLASHCPU_DTYPE_U8, FLASHCPU_DTYPE_U8, Scales::kPerToken,
     Scales::kPerToken, true, 20, 45, 40},
    {"e4m3_tensor_decode", FLASHCPU_DTYPE_F8_E4M3, FLASHCPU_DTYPE_F8_E4M3,
     Scales::kPerTensor, Scales::kPerTensor, false, 1, 200, 128},
    {"e4m3_head_prefill", FLASHCPU_DTYPE_F8_E4M3, FLASHCPU_DTYPE_F8_E4M3,
     Scales::kPerHead, Scales::kNone, false, 33, 70, 48},
    {"e5m2_head_decode", FLASHCPU_DTYPE_F8_E5M2, FLASHCPU_DTYPE_F8_E5M2,
     Scales::kPerHead, Scales::kPerHead, false, 2, 90, 80},
    {"e5m2_tensor_prefill", FLASHCPU_DTYPE_F8_E5M2, FLASHCPU_DTYPE_F8_E5M2,
     Scales::kPerTensor, Scales::kPerTensor, false, 19, 40, 64},
    // two chunks or more per kv head (the AMX F8 kernel's default shapes),
    // and a head_dim of 96 (half a 64-column piece)
    {"e4m3_head_verify", FLASHCPU_DTYPE_F8_E4M3, FLASHCPU_DTYPE_F8_E4M3,
     Scales::kPerHead, Scales::kPerHead, false, 8, 150, 64},
    {"e5m2_tensor_d96", FLASHCPU_DTYPE_F8_E5M2, FLASHCPU_DTYPE_F8_E5M2,
     Scales::kPerTensor, Scales::kPerHead, false, 3, 77, 96},
    {"q8_0_decode", FLASHCPU_DTYPE_Q8_0, FLASHCPU_DTYPE_Q8_0, Scales::kNone,
     Scales::kNone, false, 1, 260, 128},
    {"q8_0_prefill", FLASHCPU_DTYPE_Q8_0, FLASHCPU_DTYPE_Q8_0, Scales::kNone,
     Scales::kNone, false, 24, 50, 64},
    {"i8_channel_k_bf16_v", FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_BF16,
     Scales::kPerChannel, Scales::kNone, false, 1, 150, 64},
    {"i8_channel_k_prefill", FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_F16,
     Scales::kPerChannel, Scales::kNone, false, 17, 66, 96},
};

constexpr int64_t kBatch = 2, kQHeads = 8, kKvHeads = 2;

// Element strides of a [B, S, H, D] scales view of a granularity.
void ScaleStrides(Scales kind, int64_t S, int64_t H, int64_t D,
                  int64_t strides[4]) {
  const int64_t token[4] = {S * H, H, 1, 0}, head[4] = {0, 0, 1, 0},
                tensor[4] = {0, 0, 0, 0}, channel[4] = {0, 0, D, 1};
  const int64_t *from = kind == Scales::kPerToken     ? token
                        : kind == Scales::kPerHead    ? head
                        : kind == Scales::kPerChannel ? channel
                                                      : tensor;
  std::memcpy(strides, from, 4 * sizeof(int64_t));
}

int64_t ScaleCount(Scales kind, int64_t S, int64_t H, int64_t D) {
  switch (kind) {
  case Scales::kPerToken:
    return kBatch * S * H;
  case Scales::kPerHead:
    return H;
  case Scales::kPerChannel:
    return H * D;
  default:
    return 1;
  }
}

// One side (K or V): f32 source, its quantized form and scales, and the
// dequantized f32 values.
struct Side {
  flashcpu_dtype dtype;
  std::vector<float> source, dequantized, scales, zeros;
  std::vector<unsigned char> codes;
  flashcpu_kv_scales view{};
  bool scaled = false;

  void Make(flashcpu_context *ctx, flashcpu_dtype storage, Scales kind,
            bool zero_points, int64_t S, int64_t D, Rng &rng) {
    dtype = storage;
    const int64_t count = kBatch * S * kKvHeads * D;
    source.resize(static_cast<size_t>(count));
    for (float &x : source) x = static_cast<float>(rng.Uniform(-2.0, 2.5));
    dequantized.assign(source.size(), 0.0f);
    const flashcpu_tensor src = flashcpu_tensor_bshd(
        source.data(), FLASHCPU_DTYPE_F32, kBatch, S, kKvHeads, D);
    flashcpu_tensor deq = flashcpu_tensor_bshd(
        dequantized.data(), FLASHCPU_DTYPE_F32, kBatch, S, kKvHeads, D);
    if (storage == FLASHCPU_DTYPE_F16 ||
        storage == FLASHCPU_DTYPE_BF16) { // plain V beside a quantized K
      codes.resize(static_cast<size_t>(count) * 2);
      for (int64_t i = 0; i < count; i++) {
        StoreAs(&codes[static_cast<size_t>(i) * 2], storage,
                source[static_cast<size_t>(i)]);
        dequantized[static_cast<size_t>(i)] = static_cast<float>(
            RoundToDtype(source[static_cast<size_t>(i)], storage));
      }
      return;
    }
    const size_t bytes = storage == FLASHCPU_DTYPE_Q8_0
                             ? static_cast<size_t>(count / 32 * 34)
                             : static_cast<size_t>(count);
    codes.assign(bytes, 0);
    scaled = kind != Scales::kNone;
    if (scaled) {
      // Scales the library reads (per head, tensor, channel) are drawn
      // here; per-token ones flashcpu_quantize computes.
      scales.resize(static_cast<size_t>(ScaleCount(kind, S, kKvHeads, D)));
      for (float &s : scales)
        s = static_cast<float>(
            storage == FLASHCPU_DTYPE_I8   ? rng.Uniform(0.01, 0.03)
            : storage == FLASHCPU_DTYPE_U8 ? rng.Uniform(0.01, 0.02)
                                           : rng.Uniform(0.5, 2.0));
      view.data = scales.data();
      view.dtype = FLASHCPU_DTYPE_F32;
      ScaleStrides(kind, S, kKvHeads, D, view.strides);
      if (zero_points) {
        zeros.assign(scales.size(), 0.0f);
        view.zero_points = zeros.data();
      }
    }
    const flashcpu_tensor q = View(S, D);
    ASSERT_EQ(flashcpu_quantize(ctx, &src, &q, scaled ? &view : nullptr),
              FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    ASSERT_EQ(flashcpu_dequantize(ctx, &q, scaled ? &view : nullptr, &deq),
              FLASHCPU_OK)
        << flashcpu_last_error(ctx);
  }
  flashcpu_tensor View(int64_t S, int64_t D) {
    return flashcpu_tensor_bshd(codes.data(), dtype, kBatch, S, kKvHeads, D);
  }
  const flashcpu_kv_scales *Scaled() const { return scaled ? &view : nullptr; }
};

using QuantSuite = KernelSuite<QuantCase>;

// A case's inputs: K and V quantized, their dequantized f32 copies, q, and
// the call's parameters.
struct Inputs {
  Side k, v;
  std::vector<float> q_data; // values exact in bf16
  std::vector<uint16_t> q_bf16;
  flashcpu_dtype q_dtype = FLASHCPU_DTYPE_F32; // how Run passes q
  int64_t S = 0, D = 0, L = 0;
  int64_t lengths[kBatch] = {0, 0};
  flashcpu_attention_params params{};

  void Make(flashcpu_context *context, const QuantCase &c) {
    S = c.kv_len;
    D = c.head_dim;
    L = c.q_len;
    Rng rng(static_cast<uint64_t>(S * 131 + D * 7 + L));
    k.Make(context, c.k, c.k_scales, c.zero_points, S, D, rng);
    v.Make(context, c.v, c.v_scales, c.zero_points, S, D, rng);
    q_data.resize(static_cast<size_t>(kBatch * L * kQHeads * D));
    for (float &x : q_data)
      x = static_cast<float>(
          RoundToDtype(rng.Uniform(-1.0, 1.0), FLASHCPU_DTYPE_BF16));
    q_bf16.resize(q_data.size());
    flashcpu_attention_params_init(&params);
    params.flags = FLASHCPU_FLAG_CAUSAL;
    lengths[0] = S;
    lengths[1] = S - 3;
    params.kv_lengths = lengths;
  }
  size_t OutCount() const {
    return static_cast<size_t>(kBatch * L * kQHeads * D);
  }
  // Runs attention on the quantized (or, with dequantized, the f32) cache
  // into out and lse; "cannot take" comes back as a skip reason.
  flashcpu_status Run(flashcpu_context *context, bool dequantized,
                      std::vector<float> *out, std::vector<float> *lse) {
    out->assign(OutCount(), NAN);
    lse->assign(static_cast<size_t>(kBatch * kQHeads * L), NAN);
    if (q_dtype == FLASHCPU_DTYPE_BF16)
      for (size_t i = 0; i < q_data.size(); i++)
        StoreAs(&q_bf16[i], FLASHCPU_DTYPE_BF16, q_data[i]);
    const flashcpu_tensor q = flashcpu_tensor_bshd(
        q_dtype == FLASHCPU_DTYPE_BF16 ? static_cast<void *>(q_bf16.data())
                                       : static_cast<void *>(q_data.data()),
        q_dtype, kBatch, L, kQHeads, D);
    const flashcpu_tensor o = flashcpu_tensor_bshd(
        out->data(), FLASHCPU_DTYPE_F32, kBatch, L, kQHeads, D);
    flashcpu_attention_params use = params;
    if (dequantized) {
      const flashcpu_tensor kf = flashcpu_tensor_bshd(
          k.dequantized.data(), FLASHCPU_DTYPE_F32, kBatch, S, kKvHeads, D);
      const flashcpu_tensor vf = flashcpu_tensor_bshd(
          v.dequantized.data(), FLASHCPU_DTYPE_F32, kBatch, S, kKvHeads, D);
      return flashcpu_attention(context, &q, &kf, &vf, &o, lse->data(), &use);
    }
    use.k_scales = k.Scaled();
    use.v_scales = v.Scaled();
    const flashcpu_tensor kq = k.View(S, D), vq = v.View(S, D);
    return flashcpu_attention(context, &q, &kq, &vq, &o, lse->data(), &use);
  }
};

bool CannotTake(flashcpu_status status, flashcpu_context *context) {
  return status == FLASHCPU_ERROR_INVALID_ARGUMENT &&
         std::string(flashcpu_last_error(context)).find("cannot take") !=
             std::string::npos;
}

// Kernels whose scores round q to integers (registry rows named "i16dot":
// 15-bit codes and int16 weights; "i8dot": 8-bit codes and weights; the
// AMX-INT8 kernel: 15-bit codes, weights to 32639 per 64-key group).
bool RoundsQ(Kernel kernel) {
  const std::string name = kernel->name;
  return name.find("i16dot") != std::string::npos ||
         name.find("i8dot") != std::string::npos ||
         name.find("__amxint8") != std::string::npos;
}
bool RoundsToBytes(Kernel kernel) {
  return std::string(kernel->name).find("i8dot") != std::string::npos;
}
bool OnAmxTiles(Kernel kernel) {
  return std::string(kernel->name).find("__amxint8") != std::string::npos;
}
// Keys that share one step of the rounded weights, and the largest code.
double KeysPerWeightStep(Kernel kernel) {
  return OnAmxTiles(kernel) ? 64.0 : 16.0;
}
double WeightCodes(Kernel kernel) {
  return RoundsToBytes(kernel) ? 255.0 : OnAmxTiles(kernel) ? 32639.0 : 32767.0;
}

// The F8 kernels: F8 rows read before their scale, which multiplies each
// key's dot products and weights instead of each element.
bool ScalesAfterTheSum(Kernel kernel) {
  return std::string(kernel->name).find("_f8__") != std::string::npos;
}
// The AMX F8 kernel: bf16 q only (the cases' q values are exact in bf16,
// and both kernels are given q as bf16 then).
bool TakesBf16QOnly(Kernel kernel) {
  return std::string(kernel->name).find("_amx_f8__") != std::string::npos;
}
bool HasF8(const QuantCase &c) {
  const auto f8 = [](flashcpu_dtype t) {
    return t == FLASHCPU_DTYPE_F8_E4M3 || t == FLASHCPU_DTYPE_F8_E5M2;
  };
  return f8(c.k) || f8(c.v);
}

// The f32 split-KV kernel of an integer kernel's ISA.
Kernel ExactKernelOf(Kernel kernel) {
  return fc_attention_kernel_find(kernel->isa == FLASHCPU_ISA_AVX2
                                      ? "fc_decode_splitkv__avx2"
                                      : "fc_decode_splitkv__avx512");
}

// Runs the quantized case on context's kernel into out and on the exact
// kernel of its ISA into want; *skip says why the kernel does not take it
// (nothing is run then).
void RunAgainstTheExactKernel(Kernel kernel, flashcpu_context *context,
                              Inputs *in, std::vector<float> *out,
                              std::vector<float> *want, std::string *skip) {
  flashcpu_context *exact = KernelContext(ExactKernelOf(kernel));
  ASSERT_NE(exact, nullptr);
  in->q_dtype =
      TakesBf16QOnly(kernel) ? FLASHCPU_DTYPE_BF16 : FLASHCPU_DTYPE_F32;
  std::vector<float> lse, want_lse;
  const flashcpu_status status = in->Run(context, false, out, &lse);
  if (CannotTake(status, context)) {
    *skip = flashcpu_last_error(context);
    return;
  }
  ASSERT_EQ(status, FLASHCPU_OK) << flashcpu_last_error(context);
  ASSERT_EQ(in->Run(exact, false, want, &want_lse), FLASHCPU_OK)
      << flashcpu_last_error(exact);
}

// RunAgainstTheExactKernel, the test skipped where the kernel does not take
// the case (the caller returns on IsSkipped()).
void RunAgainstTheExactKernelOrSkip(Kernel kernel, flashcpu_context *context,
                                    Inputs *in, std::vector<float> *out,
                                    std::vector<float> *want) {
  std::string skip;
  RunAgainstTheExactKernel(kernel, context, in, out, want, &skip);
  if (!skip.empty())
    GTEST_SKIP() << kernel->name << " does not take this case: " << skip;
}

// The case's inputs made on context, then RunAgainstTheExactKernelOrSkip
// (the caller returns on a fatal failure or IsSkipped()).
void MakeAndRunAgainstTheExactKernel(Kernel kernel, flashcpu_context *context,
                                     const QuantCase &c, Inputs *in,
                                     std::vector<float> *out,
                                     std::vector<float> *want) {
  ASSERT_NE(context, nullptr);
  in->Make(context, c);
  if (::testing::Test::HasFatalFailure()) return;
  RunAgainstTheExactKernelOrSkip(kernel, context, in, out, want);
}

// Runs in on its dequantized (f32) cache into out_f and lse_f, then on the
// quantized one into out_q and lse_q, with context's kernel; *skip says
// why the kernel does not take one of them (nothing more is run then).
void RunOnBothCaches(flashcpu_context *context, Inputs *in,
                     std::vector<float> *out_q, std::vector<float> *lse_q,
                     std::vector<float> *out_f, std::vector<float> *lse_f,
                     std::string *skip) {
  const flashcpu_status plain = in->Run(context, true, out_f, lse_f);
  if (CannotTake(plain, context)) {
    *skip = std::string("does not take this shape: ") +
            flashcpu_last_error(context);
    return;
  }
  ASSERT_EQ(plain, FLASHCPU_OK) << flashcpu_last_error(context);
  const flashcpu_status quantized = in->Run(context, false, out_q, lse_q);
  if (CannotTake(quantized, context)) {
    *skip = std::string("does not take quantized K/V: ") +
            flashcpu_last_error(context);
    return;
  }
  ASSERT_EQ(quantized, FLASHCPU_OK) << flashcpu_last_error(context);
}

// The quantized cache gives the dequantized cache's bytes (output and
// lse), all finite; *skip says why the kernel does not take the case.
void ExpectTheDequantizedBytes(flashcpu_context *context, Inputs *in,
                               std::string *skip) {
  std::vector<float> out_q, out_f, lse_q, lse_f;
  RunOnBothCaches(context, in, &out_q, &lse_q, &out_f, &lse_f, skip);
  if (testing::Test::HasFatalFailure() || !skip->empty()) return;
  EXPECT_EQ(
      std::memcmp(out_q.data(), out_f.data(), out_q.size() * sizeof(float)), 0);
  EXPECT_EQ(
      std::memcmp(lse_q.data(), lse_f.data(), lse_q.size() * sizeof(float)), 0);
  for (size_t i = 0; i < out_q.size(); i++)
    ASSERT_TRUE(std::isfinite(out_q[i])) << "element " << i;
}

TEST_P(QuantSuite, SameBytesAsTheDequantizedCache) {
  const QuantCase &c = test_case();
  flashcpu_context *context = ctx();
  ASSERT_NE(context, nullptr);
  if (RoundsQ(kernel()))
    GTEST_SKIP() << "rounds q: IntegerScoresTrackTheExactKernel checks it";
  if (ScalesAfterTheSum(kernel()) && HasF8(c))
    GTEST_SKIP() << "scales after the sum: F8ScalesTrackTheExactKernel";
  Inputs in;
  in.Make(context, c);
  if (HasFatalFailure()) return;
  std::string skip;
  ExpectTheDequantizedBytes(context, &in, &skip);
  if (!skip.empty()) GTEST_SKIP() << kernel()->name << " " << skip;
}

// A kernel that rounds q to integers for its scores (codes up to c = 16383,
// or 127 for byte dot products) against the exact kernel of its ISA on the
// same quantized cache: q's rounding moves each (natural-log) score by at
// most max|q| * scale / (2 c) * ||k_j||_1, and a softmax whose scores move
// by at most e moves the output by at most 2 e max|v| (to first order;
// twice that allowed). Where V is I8 or U8 the weights times the rows'
// scales are rounded against each 16-key block's largest, to int16 (a
// step of w_max(block) * r / 32767, r: the largest over the smallest V row
// scale) or to bytes (w_max(block) * r / 255) for each weight, so at most
// 16 r / (2 * 32767) (or / 510) max|v| on the normalised output (twice
// that allowed).
// The largest |value| of V and its largest row scale over its smallest (1
// without scales): what bounds the rounding of integer values.
std::pair<double, double> ValueBounds(const Inputs &in) {
  double v_max = 0.0, scale_ratio = 1.0;
  for (float x : in.v.dequantized)
    v_max = std::max(v_max, std::fabs(static_cast<double>(x)));
  if (!in.v.scales.empty()) {
    const auto [low, high] =
        std::minmax_element(in.v.scales.begin(), in.v.scales.end());
    scale_ratio = static_cast<double>(*high) / static_cast<double>(*low);
  }
  return {v_max, scale_ratio};
}

TEST_P(QuantSuite, IntegerScoresTrackTheExactKernel) {
  const QuantCase &c = test_case();
  if (!RoundsQ(kernel()))
    GTEST_SKIP() << "exact scores: SameBytesAsTheDequantizedCache checks it";
  Inputs in;
  std::vector<float> out, want;
  MakeAndRunAgainstTheExactKernel(kernel(), ctx(), c, &in, &out, &want);
  if (HasFatalFailure() || IsSkipped()) return;
  double q_max = 0.0, k_l1 = 0.0;
  for (float x : in.q_data)
    q_max = std::max(q_max, std::fabs(static_cast<double>(x)));
  const auto [v_max, scale_ratio] = ValueBounds(in);
  for (size_t row = 0;
       row < in.k.dequantized.size() / static_cast<size_t>(in.D); row++) {
    double l1 = 0.0;
    for (int64_t d = 0; d < in.D; d++)
      l1 += std::fabs(
          static_cast<double>(in.k.dequantized[row * static_cast<size_t>(in.D) +
                                               static_cast<size_t>(d)]));
    k_l1 = std::max(k_l1, l1);
  }
  const bool bytes = RoundsToBytes(kernel());
  const double q_codes = bytes ? 127.0 : 16383.0,
               w_codes = WeightCodes(kernel());
  const double score_error =
      q_max / std::sqrt(static_cast<double>(in.D)) / (2.0 * q_codes) * k_l1;
  const bool integer_values =
      c.v == FLASHCPU_DTYPE_I8 || c.v == FLASHCPU_DTYPE_U8;
  const double value_error =
      integer_values
          ? KeysPerWeightStep(kernel()) * scale_ratio / (2.0 * w_codes) * v_max
          : 0.0;
  const double bound = 4.0 * score_error * v_max + 2.0 * value_error + 1e-6;
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); i++) {
    ASSERT_TRUE(std::isfinite(out[i])) << "element " << i;
    worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - want[i]));
  }
  EXPECT_LE(worst, bound) << "score error bound " << score_error;
  // AVX2 reads rows in place (and so rounds) only where head_dim is a
  // multiple of 16; other rows are staged as f32 and take the exact path.
  if (kernel()->isa != FLASHCPU_ISA_AVX2 || in.D % 16 == 0)
    EXPECT_GT(worst, 0.0) << "no rounding at all: is q rounded?";
  else
    EXPECT_EQ(worst, 0.0) << "staged rows take the exact path";
}

// How far the F8 kernel may be from the exact kernel of its ISA on the
// same cache: the sums round in another order and a key's scale meets its
// dot product (and its weight) rather than each element, so each score
// moves by at most about D * 2^-23 * max|q| * scale * ||k_j||_1 and each
// output by twice that times max|v| (to first order; twice allowed), and
// the weighted values by a few roundings of max|v|.
double F8Bound(const Inputs &in) {
  double q_max = 0.0, k_l1 = 0.0, v_max = 0.0;
  for (float x : in.q_data)
    q_max = std::max(q_max, std::fabs(static_cast<double>(x)));
  const size_t D = static_cast<size_t>(in.D);
  for (size_t row = 0; row < in.k.dequantized.size() / D; row++) {
    double l1 = 0.0;
    for (size_t d = 0; d < D; d++)
      l1 += std::fabs(static_cast<double>(in.k.dequantized[row * D + d]));
    k_l1 = std::max(k_l1, l1);
  }
  for (float x : in.v.dequantized)
    v_max = std::max(v_max, std::fabs(static_cast<double>(x)));
  const double score_error = static_cast<double>(in.D) * std::ldexp(1.0, -23) *
                             q_max / std::sqrt(static_cast<double>(in.D)) *
                             k_l1;
  return 4.0 * score_error * v_max + 64.0 * std::ldexp(1.0, -23) * v_max + 1e-7;
}

// The F8 kernel on an F8 cache: within f32 rounding of the exact kernel
// of its ISA (itself the dequantized cache's bytes), all finite, and not
// the very same bytes everywhere (else it read the rows dequantized).
TEST_P(QuantSuite, F8ScalesTrackTheExactKernel) {
  const QuantCase &c = test_case();
  if (!ScalesAfterTheSum(kernel()) || !HasF8(c))
    GTEST_SKIP() << "not the F8 kernel on an F8 cache";
  Inputs in;
  std::vector<float> out, want;
  MakeAndRunAgainstTheExactKernel(kernel(), ctx(), c, &in, &out, &want);
  if (HasFatalFailure() || IsSkipped()) return;
  const double bound = F8Bound(in);
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); i++) {
    ASSERT_TRUE(std::isfinite(out[i])) << "element " << i;
    worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - want[i]));
  }
  EXPECT_LE(worst, bound);
  EXPECT_GT(worst, 0.0) << "the very bytes: were the rows dequantized?";
}

// Where q cannot be rounded to integers (NaN in it, or so small that its
// scale would be subnormal), a kernel that rounds q takes the f32 path for
// that chunk: the very bytes of the exact kernel of its ISA.
TEST_P(QuantSuite, UnroundableQTakesTheExactPath) {
  const QuantCase &c = test_case();
  if (!RoundsQ(kernel())) GTEST_SKIP() << "exact scores";
  flashcpu_context *context = ctx();
  ASSERT_NE(context, nullptr);
  Inputs in;
  in.Make(context, c);
  if (HasFatalFailure()) return;
  // Batch 0's q tiny (1e-41: a scale of 6e-46 would be subnormal), one
  // element of batch 1's first row NaN.
  const size_t per_batch = in.q_data.size() / kBatch;
  for (size_t i = 0; i < per_batch; i++) in.q_data[i] *= 1e-41f;
  in.q_data[per_batch + 3] = NAN;
  std::vector<float> out, want;
  RunAgainstTheExactKernelOrSkip(kernel(), context, &in, &out, &want);
  if (HasFatalFailure() || IsSkipped()) return;
  // Batch 0 whole, and the NaN row's chunk (its 4 slots: one kv head's
  // group of the first row) of batch 1. The AMX kernel's f32 path sums in
  // another order and still rounds the weights where V is I8 or U8: within
  // that rounding's bound instead of the same bytes.
  const size_t chunk = static_cast<size_t>(kQHeads / kKvHeads * in.D);
  if (OnAmxTiles(kernel())) {
    const auto [v_max, scale_ratio] = ValueBounds(in);
    const double bound = 2.0 * KeysPerWeightStep(kernel()) * scale_ratio /
                             (2.0 * WeightCodes(kernel())) * v_max +
                         1e-5;
    for (size_t i = 0; i < per_batch + chunk; i++) {
      ASSERT_EQ(std::isnan(out[i]), std::isnan(want[i])) << "element " << i;
      if (!std::isnan(out[i])) {
        EXPECT_NEAR(out[i], want[i], bound) << "element " << i;
      }
    }
  } else {
    EXPECT_EQ(std::memcmp(out.data(), want.data(), per_batch * sizeof(float)),
              0);
    EXPECT_EQ(std::memcmp(out.data() + per_batch, want.data() + per_batch,
                          chunk * sizeof(float)),
              0);
  }
  EXPECT_TRUE(std::isnan(out[per_batch])) << "the NaN row's head";
}

// A NaN V row scale (per token) reaches exactly the outputs that see its
// key, as on the exact kernel: a block whose weights cannot be rounded to
// integers takes the f32 path.
TEST_P(QuantSuite, NanValueScaleReachesTheRowsThatSeeIt) {
  const QuantCase &c = test_case();
  if (!RoundsQ(kernel()))
    GTEST_SKIP() << "exact kernels: SameBytesAsTheDequantizedCache";
  if (c.v_scales != Scales::kPerToken)
    GTEST_SKIP() << "V has no per-token scales";
  flashcpu_context *context = ctx();
  ASSERT_NE(context, nullptr);
  Inputs in;
  in.Make(context, c);
  if (HasFatalFailure()) return;
  // Batch 1, key 40 (of S - 3), kv head 1.
  in.v.scales[static_cast<size_t>((1 * in.S + 40) * kKvHeads + 1)] = NAN;
  std::vector<float> out, want;
  RunAgainstTheExactKernelOrSkip(kernel(), context, &in, &out, &want);
  if (HasFatalFailure() || IsSkipped()) return;
  size_t nans = 0;
  for (size_t i = 0; i < out.size(); i++) {
    ASSERT_EQ(std::isnan(out[i]), std::isnan(want[i])) << "element " << i;
    nans += std::isnan(out[i]) ? 1 : 0;
  }
  EXPECT_GT(nans, 0u);
  EXPECT_LT(nans, out.size() / 2) << "the NaN stays in kv head 1 of batch 1";
}

// NaN codes of an fp8 cache (0x7f, 0xff) read as NaN: the output is the
// same kernel's on the dequantized cache with NaN in the same places, so
// the NaN reaches exactly the rows that see its key (the kernels widen
// the codes of a block without their NaN step only where it holds none).
class Fp8Suite : public KernelSuite<QuantCase> {
protected:
  // The case's inputs on the kernel's context; false (a failure recorded)
  // where they could not be made.
  bool MakeInputs(flashcpu_context **context, Inputs *in) {
    *context = ctx();
    EXPECT_NE(*context, nullptr);
    if (*context == nullptr) return false;
    in->Make(*context, test_case());
    return !HasFatalFailure();
  }
};

TEST_P(Fp8Suite, NanCodesReachTheRowsThatSeeThem) {
  if (RoundsQ(kernel())) GTEST_SKIP() << "integer kernels do not take fp8 K";
  flashcpu_context *context = nullptr;
  Inputs in;
  if (!MakeInputs(&context, &in)) return;
  const auto at = [&](int64_t b, int64_t key, int64_t head, int64_t d) {
    return static_cast<size_t>(((b * in.S + key) * kKvHeads + head) * in.D + d);
  };
  // K: batch 1, key S / 2, kv head 1; V: batch 0, key 10, kv head 0.
  in.k.codes[at(1, in.S / 2, 1, 5)] = 0x7f;
  in.k.dequantized[at(1, in.S / 2, 1, 5)] = NAN;
  in.v.codes[at(0, 10, 0, 3)] = 0xff;
  in.v.dequantized[at(0, 10, 0, 3)] = NAN;
  std::vector<float> out_q, out_f, lse_q, lse_f;
  std::string skip;
  // The F8 kernel takes no f32 cache: against the exact kernel on the F8
  // one (the dequantized cache's bytes), within f32 rounding (F8Bound).
  const bool rounds = ScalesAfterTheSum(kernel());
  if (rounds)
    RunAgainstTheExactKernel(kernel(), context, &in, &out_q, &out_f, &skip);
  else
    RunOnBothCaches(context, &in, &out_q, &lse_q, &out_f, &lse_f, &skip);
  if (HasFatalFailure()) return;
  if (!skip.empty()) GTEST_SKIP() << kernel()->name << " " << skip;
  const double bound = rounds ? F8Bound(in) : 0.0;
  size_t nans = 0;
  for (size_t i = 0; i < out_q.size(); i++) {
    ASSERT_EQ(std::isnan(out_q[i]), std::isnan(out_f[i])) << "element " << i;
    if (std::isnan(out_q[i])) {
      nans++;
      continue;
    }
    if (rounds)
      ASSERT_NEAR(out_q[i], out_f[i], bound) << "element " << i;
    else
      ASSERT_EQ(std::memcmp(&out_q[i], &out_f[i], sizeof(float)), 0)
          << "element " << i;
  }
  EXPECT_GT(nans, 0u);
  EXPECT_LT(nans, out_q.size() / 2) << "the NaNs stay in their kv heads";
}

// Scales so large that scale * 2^8 overflows (2^121): the E4M3 kernels
// that widen a row's codes to value * 2^-8 and multiply by scale * 2^8
// must take the plain widening then, and still give the dequantized
// cache's bytes (q is small enough that every score stays finite). The F8
// kernel reads E5M2 rows (exact as f16) before such scales still: within
// f32 rounding of those bytes there.
TEST_P(Fp8Suite, HugeScalesGiveTheDequantizedBytes) {
  if (RoundsQ(kernel())) GTEST_SKIP() << "integer kernels do not take fp8 K";
  flashcpu_context *context = nullptr;
  Inputs in;
  if (!MakeInputs(&context, &in)) return;
  for (Side *side : {&in.k, &in.v}) {
    if (!side->scaled) continue;
    for (float &s : side->scales) s = std::ldexp(1.0f, 121);
    const flashcpu_tensor codes = side->View(in.S, in.D);
    flashcpu_tensor deq =
        flashcpu_tensor_bshd(side->dequantized.data(), FLASHCPU_DTYPE_F32,
                             kBatch, in.S, kKvHeads, in.D);
    ASSERT_EQ(flashcpu_dequantize(context, &codes, &side->view, &deq),
              FLASHCPU_OK)
        << flashcpu_last_error(context);
  }
  if (in.k.scaled)
    for (float &x : in.q_data) x = std::ldexp(x, -118);
  std::string skip;
  if (ScalesAfterTheSum(kernel())) { /* it takes no f32 cache */
    std::vector<float> out_q, out_f;
    RunAgainstTheExactKernel(kernel(), context, &in, &out_q, &out_f, &skip);
    if (HasFatalFailure()) return;
    if (!skip.empty()) GTEST_SKIP() << kernel()->name << " " << skip;
    /* the AMX F8 kernel reads E4M3 rows before such scales too */
    const bool e4m3 =
        test_case().k == FLASHCPU_DTYPE_F8_E4M3 && !TakesBf16QOnly(kernel());
    const double bound = F8Bound(in);
    for (size_t i = 0; i < out_q.size(); i++) {
      ASSERT_TRUE(std::isfinite(out_q[i])) << "element " << i;
      if (e4m3) /* the plain widening: the very bytes */
        ASSERT_EQ(std::memcmp(&out_q[i], &out_f[i], sizeof(float)), 0)
            << "element " << i;
      else
        ASSERT_NEAR(out_q[i], out_f[i], bound) << "element " << i;
    }
    return;
  }
  ExpectTheDequantizedBytes(context, &in, &skip);
  if (!skip.empty()) GTEST_SKIP() << kernel()->name << " " << skip;
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, QuantSuite,
    testing::ValuesIn(ForEveryKernel(std::vector<QuantCase>(std::begin(kCases),
                                                            std::end(kCases)))),
    KernelParamName<QuantCase>([](const QuantCase &c) {
      return std::string(c.name);
    }));

// The fp8 cases only: one test per kernel and fp8 case.
std::vector<QuantCase> Fp8Cases() {
  std::vector<QuantCase> cases;
  for (const QuantCase &c : kCases)
    if (c.k == FLASHCPU_DTYPE_F8_E4M3 || c.k == FLASHCPU_DTYPE_F8_E5M2)
      cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Kernels, Fp8Suite,
                         testing::ValuesIn(ForEveryKernel(Fp8Cases())),
                         KernelParamName<QuantCase>([](const QuantCase &c) {
                           return std::string(c.name);
                         }));

} // namespace
} // namespace fctest
