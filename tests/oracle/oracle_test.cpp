// The oracle itself, on cases small enough to work out by hand, so that the
// suites comparing the library with it rest on something checked. Each
// expectation below is derived from the header's wording, not computed by
// code shared with the oracle.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "flashcpu/flashcpu.h"
#include "oracle.h"

namespace {

// A tiny f32 problem: q [1, L, Hq, D], k/v [1, S, Hkv, D], BSHD.
struct Tiny {
  int64_t L, S, Hq, Hkv, D;
  std::vector<float> q, k, v;
  flashcpu_attention_params params;

  Tiny(int64_t l, int64_t s, int64_t hq, int64_t hkv, int64_t d)
      : L(l), S(s), Hq(hq), Hkv(hkv), D(d),
        q(static_cast<size_t>(l * hq * d), 0.0f),
        k(static_cast<size_t>(s * hkv * d + 1), 0.0f),
        v(static_cast<size_t>(s * hkv * d + 1), 0.0f) {
    flashcpu_attention_params_init(&params);
  }
  float &Q(int64_t i, int64_t h, int64_t d) { return q[static_cast<size_t>((i * Hq + h) * D + d)]; }
  float &K(int64_t j, int64_t h, int64_t d) { return k[static_cast<size_t>((j * Hkv + h) * D + d)]; }
  float &V(int64_t j, int64_t h, int64_t d) { return v[static_cast<size_t>((j * Hkv + h) * D + d)]; }

  std::vector<double> Row(int64_t h, int64_t i, double *lse, bool null_params = false) {
    flashcpu_tensor tq = flashcpu_tensor_bshd(q.data(), FLASHCPU_DTYPE_F32, 1, L, Hq, D);
    flashcpu_tensor tk = flashcpu_tensor_bshd(k.data(), FLASHCPU_DTYPE_F32, 1, S, Hkv, D);
    flashcpu_tensor tv = flashcpu_tensor_bshd(v.data(), FLASHCPU_DTYPE_F32, 1, S, Hkv, D);
    std::vector<double> out(static_cast<size_t>(D));
    flashcpu_oracle_row(&tq, &tk, &tv, null_params ? nullptr : &params, 0, h, i, out.data(), lse);
    return out;
  }
};

TEST(Oracle, TwoKeysSoftmaxByHand) {
  // Scores 0 and ln 3 (scale 1): weights 1/4 and 3/4; lse = ln 4.
  Tiny t(1, 2, 1, 1, 1);
  t.params.scale = 1.0f;
  t.Q(0, 0, 0) = 1.0f;
  t.K(0, 0, 0) = 0.0f;
  t.K(1, 0, 0) = static_cast<float>(std::log(3.0));
  t.V(0, 0, 0) = 4.0f;
  t.V(1, 0, 0) = 8.0f;
  double lse;
  // K(1) is ln 3 rounded to float; the weights follow it exactly.
  const double w1 = std::exp(static_cast<double>(t.K(1, 0, 0)));
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], (4.0 + 8.0 * w1) / (1.0 + w1), 1e-14);
  EXPECT_NEAR(lse, std::log(1.0 + w1), 1e-14);
  EXPECT_NEAR(lse, std::log(4.0), 1e-7);
}

TEST(Oracle, DefaultScaleIsOneOverSqrtHeadDim) {
  // D = 4: scale 1/2. q = k0 = (1, 1, 1, 1), k1 = 0: scores 2 and 0.
  Tiny t(1, 2, 1, 1, 4);
  for (int d = 0; d < 4; d++) {
    t.Q(0, 0, d) = 1.0f;
    t.K(0, 0, d) = 1.0f;
    t.V(0, 0, d) = 1.0f;
    t.V(1, 0, d) = 0.0f;
  }
  double lse;
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], std::exp(2.0) / (std::exp(2.0) + 1.0), 1e-14);
  EXPECT_NEAR(lse, std::log(std::exp(2.0) + 1.0), 1e-14);
  double lse_null;  // NULL params are the defaults
  EXPECT_EQ(t.Row(0, 0, &lse_null, true)[0], t.Row(0, 0, &lse)[0]);
}

// With q = 0 every visible key weighs the same: the output is the mean of
// the visible V rows and lse = ln(count). V(j) = j makes the mean tell
// which keys were visible.
struct MeanCase {
  Tiny t;
  explicit MeanCase(int64_t L, int64_t S) : t(L, S, 1, 1, 1) {
    for (int64_t j = 0; j < S; j++) t.V(j, 0, 0) = static_cast<float>(j);
  }
  // Mean over keys [first, last], inclusive.
  static double Mean(int64_t first, int64_t last) { return (first + last) / 2.0; }
};

TEST(Oracle, CausalIsBottomRightAligned) {
  MeanCase m(2, 5);  // row 0 sees keys 0..3, row 1 keys 0..4
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;
  double lse;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 0, &lse)[0], MeanCase::Mean(0, 3));
  EXPECT_DOUBLE_EQ(lse, std::log(4.0));
  EXPECT_DOUBLE_EQ(m.t.Row(0, 1, &lse)[0], MeanCase::Mean(0, 4));
}

TEST(Oracle, CausalRowsBeforeTheKeysAreEmpty) {
  MeanCase m(4, 2);  // position i - 2: rows 0 and 1 see nothing
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;
  double lse;
  EXPECT_EQ(m.t.Row(0, 1, &lse)[0], 0.0);
  EXPECT_EQ(lse, -INFINITY);
  EXPECT_DOUBLE_EQ(m.t.Row(0, 2, &lse)[0], MeanCase::Mean(0, 0));
  EXPECT_DOUBLE_EQ(m.t.Row(0, 3, &lse)[0], MeanCase::Mean(0, 1));
}

TEST(Oracle, WindowIsInclusiveOnBothSides) {
  MeanCase m(6, 6);
  m.t.params.window_left = 2;
  m.t.params.window_right = 1;
  double lse;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 3, &lse)[0], MeanCase::Mean(1, 4));
  EXPECT_DOUBLE_EQ(lse, std::log(4.0));
  EXPECT_DOUBLE_EQ(m.t.Row(0, 0, &lse)[0], MeanCase::Mean(0, 1));
  EXPECT_DOUBLE_EQ(m.t.Row(0, 5, &lse)[0], MeanCase::Mean(3, 5));
  m.t.params.window_left = m.t.params.window_right = 0;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 4, &lse)[0], 4.0);
  EXPECT_DOUBLE_EQ(lse, 0.0);
  m.t.params.window_left = m.t.params.window_right = INT64_MAX;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 4, &lse)[0], MeanCase::Mean(0, 5));
}

TEST(Oracle, TreeMaskCoversOnlyTheNewestKeys) {
  MeanCase m(2, 6);
  // Tree over the newest 3 keys (3, 4, 5). Row 0 allows bit 1 (key 4);
  // row 1 allows bits 0 and 2 (keys 3 and 5). Keys 0..2 are not affected.
  uint64_t bits[2] = {0b010, 0b101};
  flashcpu_tree_mask tree{bits, 2, 3, 1, 0};
  m.t.params.tree_mask = &tree;
  double lse;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 0, &lse)[0], (0 + 1 + 2 + 4) / 4.0);
  EXPECT_DOUBLE_EQ(m.t.Row(0, 1, &lse)[0], (0 + 1 + 2 + 3 + 5) / 5.0);
  EXPECT_DOUBLE_EQ(lse, std::log(5.0));
}

TEST(Oracle, TreeMaskWordsAndRowStride) {
  MeanCase m(2, 70);
  // 70 keys: two words a row; row stride 3 words. Row 1 allows only bit 65
  // (word 1, bit 1): key 65.
  uint64_t bits[6] = {0, 0, 0, 0, 0b10, 0};
  flashcpu_tree_mask tree{bits, 2, 70, 3, 0};
  m.t.params.tree_mask = &tree;
  double lse;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 1, &lse)[0], 65.0);
  EXPECT_EQ(m.t.Row(0, 0, &lse)[0], 0.0);
  EXPECT_EQ(lse, -INFINITY);
}

TEST(Oracle, AdditiveMaskAddsAfterSoftcapAndMinusInfinityHides) {
  Tiny t(1, 3, 1, 1, 1);
  t.params.scale = 1.0f;
  t.params.softcap = 5.0f;
  t.Q(0, 0, 0) = 1.0f;
  t.K(0, 0, 0) = 10.0f;  // score 10 -> 5 tanh(2), then + 1
  t.K(1, 0, 0) = 0.0f;   // score 0 -> 0, then + 0
  t.K(2, 0, 0) = 50.0f;  // hidden by -inf: would dominate otherwise
  t.V(0, 0, 0) = 1.0f;
  t.V(1, 0, 0) = 0.0f;
  t.V(2, 0, 0) = NAN;  // a hidden key's V is never read
  float mask[3] = {1.0f, 0.0f, -INFINITY};
  flashcpu_additive_mask additive{mask, {0, 0, 0, 1}};
  t.params.additive_mask = &additive;
  const double s0 = 5.0 * std::tanh(2.0) + 1.0;
  double lse;
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], std::exp(s0) / (std::exp(s0) + 1.0), 1e-14);
  EXPECT_NEAR(lse, std::log(std::exp(s0) + 1.0), 1e-14);
}

TEST(Oracle, AdditiveMaskStridesSelectBatchHeadRowKey) {
  Tiny t(2, 2, 2, 1, 1);  // q = 0: scores are the mask values
  t.V(0, 0, 0) = 0.0f;
  t.V(1, 0, 0) = 1.0f;
  // value(h, i, j) = data[h * 4 + i * 2 + j]; pick (h = 1, i = 0).
  float mask[8] = {0, 0, 0, 0, 0.0f, static_cast<float>(std::log(3.0)), 0, 0};
  flashcpu_additive_mask additive{mask, {0, 4, 2, 1}};
  t.params.additive_mask = &additive;
  double lse;
  EXPECT_NEAR(t.Row(1, 0, &lse)[0], 0.75, 1e-7);
  EXPECT_DOUBLE_EQ(t.Row(0, 0, &lse)[0], 0.5);
  EXPECT_DOUBLE_EQ(t.Row(1, 1, &lse)[0], 0.5);
}

TEST(Oracle, GqaMapsQueryHeadToKvHead) {
  Tiny t(1, 1, 6, 3, 1);  // group 2: heads 0,1 -> 0; 2,3 -> 1; 4,5 -> 2
  for (int64_t h = 0; h < 3; h++) t.V(0, h, 0) = static_cast<float>(10 + h);
  double lse;
  for (int64_t h = 0; h < 6; h++) EXPECT_DOUBLE_EQ(t.Row(h, 0, &lse)[0], 10.0 + h / 2) << h;
}

TEST(Oracle, KvLengthsLimitKeysAndAlignMasks) {
  MeanCase m(2, 6);
  int64_t lengths[1] = {3};
  m.t.params.kv_lengths = lengths;
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;  // aligned to 3: row 0 sees 0..1
  for (int64_t j = 3; j < 6; j++) m.t.V(j, 0, 0) = NAN;
  double lse;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 0, &lse)[0], MeanCase::Mean(0, 1));
  EXPECT_DOUBLE_EQ(m.t.Row(0, 1, &lse)[0], MeanCase::Mean(0, 2));
  lengths[0] = 0;
  EXPECT_EQ(m.t.Row(0, 1, &lse)[0], 0.0);
  EXPECT_EQ(lse, -INFINITY);
}

TEST(Oracle, NanPropagatesFromWhatTheRowReads) {
  MeanCase m(2, 3);
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;  // row 0 sees keys 0, 1
  m.t.V(2, 0, 0) = NAN;                     // seen by row 1 only
  double lse;
  EXPECT_FALSE(std::isnan(m.t.Row(0, 0, &lse)[0]));
  EXPECT_TRUE(std::isnan(m.t.Row(0, 1, &lse)[0]));
  EXPECT_FALSE(std::isnan(lse));  // V does not enter lse
  m.t.Q(0, 0, 0) = NAN;
  EXPECT_TRUE(std::isnan(m.t.Row(0, 0, &lse)[0]));
  EXPECT_TRUE(std::isnan(lse));
}

TEST(Oracle, LargeScoresDoNotOverflow) {
  Tiny t(1, 2, 1, 1, 1);
  t.params.scale = 1.0f;
  t.Q(0, 0, 0) = 1.0f;
  t.K(0, 0, 0) = 1000.0f;
  t.K(1, 0, 0) = 999.0f;
  t.V(0, 0, 0) = 1.0f;
  t.V(1, 0, 0) = 0.0f;
  double lse;
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-14);
  EXPECT_NEAR(lse, 1000.0 + std::log(1.0 + std::exp(-1.0)), 1e-12);
}

TEST(Oracle, HeadMatchesRows) {
  Tiny t(3, 4, 2, 1, 2);
  for (size_t n = 0; n < t.q.size(); n++) t.q[n] = 0.1f * static_cast<float>(n % 7) - 0.3f;
  for (size_t n = 0; n < t.k.size(); n++) t.k[n] = 0.2f * static_cast<float>(n % 5) - 0.4f;
  for (size_t n = 0; n < t.v.size(); n++) t.v[n] = static_cast<float>(n);
  t.params.flags = FLASHCPU_FLAG_CAUSAL;
  flashcpu_tensor tq = flashcpu_tensor_bshd(t.q.data(), FLASHCPU_DTYPE_F32, 1, 3, 2, 2);
  flashcpu_tensor tk = flashcpu_tensor_bshd(t.k.data(), FLASHCPU_DTYPE_F32, 1, 4, 1, 2);
  flashcpu_tensor tv = flashcpu_tensor_bshd(t.v.data(), FLASHCPU_DTYPE_F32, 1, 4, 1, 2);
  double out[6], lse[3];
  ASSERT_EQ(flashcpu_oracle_head(&tq, &tk, &tv, &t.params, 0, 1, out, lse), 0);
  for (int64_t i = 0; i < 3; i++) {
    double row_lse;
    const std::vector<double> row = t.Row(1, i, &row_lse);
    EXPECT_EQ(row[0], out[i * 2]);
    EXPECT_EQ(row[1], out[i * 2 + 1]);
    EXPECT_EQ(row_lse, lse[i]);
  }
}

TEST(OracleLoad, DecodesF16AndBf16ExactlyThroughStrides) {
  // f16: 1, -2, 2^-24 (smallest subnormal), 65504, inf; bf16: 1, 2^-133, -0.
  const uint16_t half[5] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
  const double half_values[5] = {1.0, -2.0, std::ldexp(1.0, -24), 65504.0, INFINITY};
  flashcpu_tensor t = flashcpu_tensor_bshd(const_cast<uint16_t *>(half), FLASHCPU_DTYPE_F16, 1, 5, 1, 1);
  for (int64_t s = 0; s < 5; s++) EXPECT_EQ(flashcpu_oracle_load(&t, 0, s, 0, 0), half_values[s]) << s;
  const uint16_t half_nan = 0x7e01;
  flashcpu_tensor nan_view =
      flashcpu_tensor_bshd(const_cast<uint16_t *>(&half_nan), FLASHCPU_DTYPE_F16, 1, 1, 1, 1);
  EXPECT_TRUE(std::isnan(flashcpu_oracle_load(&nan_view, 0, 0, 0, 0)));

  const uint16_t bf16[3] = {0x3f80, 0x0001, 0x8000};
  t = flashcpu_tensor_bshd(const_cast<uint16_t *>(bf16), FLASHCPU_DTYPE_BF16, 1, 3, 1, 1);
  EXPECT_EQ(flashcpu_oracle_load(&t, 0, 0, 0, 0), 1.0);
  EXPECT_EQ(flashcpu_oracle_load(&t, 0, 1, 0, 0), std::ldexp(1.0, -133));
  EXPECT_TRUE(std::signbit(flashcpu_oracle_load(&t, 0, 2, 0, 0)));

  // Strides: element (b, s, h, d) at b*100 + s*10 + h*3 + d.
  std::vector<float> data(300);
  for (size_t n = 0; n < data.size(); n++) data[n] = static_cast<float>(n);
  flashcpu_tensor strided{data.data(), FLASHCPU_DTYPE_F32, {2, 5, 3, 3}, {100, 10, 3, 1}};
  EXPECT_EQ(flashcpu_oracle_load(&strided, 1, 4, 2, 1), 100 + 40 + 6 + 1);
}

}  // namespace
