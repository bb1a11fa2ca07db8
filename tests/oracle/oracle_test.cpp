// The oracle itself, on cases small enough to work out by hand, so that the
// suites comparing the library with it rest on something checked. Each
// expectation below is derived from the header's wording, not computed by
// code shared with the oracle.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
  float &Q(int64_t i, int64_t h, int64_t d) {
    return q[static_cast<size_t>((i * Hq + h) * D + d)];
  }
  float &K(int64_t j, int64_t h, int64_t d) {
    return k[static_cast<size_t>((j * Hkv + h) * D + d)];
  }
  float &V(int64_t j, int64_t h, int64_t d) {
    return v[static_cast<size_t>((j * Hkv + h) * D + d)];
  }

  std::vector<double> Row(int64_t h, int64_t i, double *lse,
                          bool null_params = false) {
    flashcpu_tensor tq =
        flashcpu_tensor_bshd(q.data(), FLASHCPU_DTYPE_F32, 1, L, Hq, D);
    flashcpu_tensor tk =
        flashcpu_tensor_bshd(k.data(), FLASHCPU_DTYPE_F32, 1, S, Hkv, D);
    flashcpu_tensor tv =
        flashcpu_tensor_bshd(v.data(), FLASHCPU_DTYPE_F32, 1, S, Hkv, D);
    std::vector<double> out(static_cast<size_t>(D));
    flashcpu_oracle_row(&tq, &tk, &tv, null_params ? nullptr : &params, 0, h, i,
                        out.data(), lse);
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
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], std::exp(2.0) / (std::exp(2.0) + 1.0),
              1e-14);
  EXPECT_NEAR(lse, std::log(std::exp(2.0) + 1.0), 1e-14);
  double lse_null; // NULL params are the defaults
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
  static double Mean(int64_t first, int64_t last) {
    return (first + last) / 2.0;
  }
};

TEST(Oracle, CausalIsBottomRightAligned) {
  MeanCase m(2, 5); // row 0 sees keys 0..3, row 1 keys 0..4
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;
  double lse;
  EXPECT_DOUBLE_EQ(m.t.Row(0, 0, &lse)[0], MeanCase::Mean(0, 3));
  EXPECT_DOUBLE_EQ(lse, std::log(4.0));
  EXPECT_DOUBLE_EQ(m.t.Row(0, 1, &lse)[0], MeanCase::Mean(0, 4));
}

TEST(Oracle, CausalRowsBeforeTheKeysAreEmpty) {
  MeanCase m(4, 2); // position i - 2: rows 0 and 1 see nothing
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
  t.K(0, 0, 0) = 10.0f; // score 10 -> 5 tanh(2), then + 1
  t.K(1, 0, 0) = 0.0f;  // score 0 -> 0, then + 0
  t.K(2, 0, 0) = 50.0f; // hidden by -inf: would dominate otherwise
  t.V(0, 0, 0) = 1.0f;
  t.V(1, 0, 0) = 0.0f;
  t.V(2, 0, 0) = NAN; // a hidden key's V is never read
  float mask[3] = {1.0f, 0.0f, -INFINITY};
  flashcpu_additive_mask additive{mask, {0, 0, 0, 1}};
  t.params.additive_mask = &additive;
  const double s0 = 5.0 * std::tanh(2.0) + 1.0;
  double lse;
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], std::exp(s0) / (std::exp(s0) + 1.0), 1e-14);
  EXPECT_NEAR(lse, std::log(std::exp(s0) + 1.0), 1e-14);
}

TEST(Oracle, AdditiveMaskStridesSelectBatchHeadRowKey) {
  Tiny t(2, 2, 2, 1, 1); // q = 0: scores are the mask values
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
  Tiny t(1, 1, 6, 3, 1); // group 2: heads 0,1 -> 0; 2,3 -> 1; 4,5 -> 2
  for (int64_t h = 0; h < 3; h++) t.V(0, h, 0) = static_cast<float>(10 + h);
  double lse;
  for (int64_t h = 0; h < 6; h++)
    EXPECT_DOUBLE_EQ(t.Row(h, 0, &lse)[0], 10.0 + h / 2) << h;
}

TEST(Oracle, KvLengthsLimitKeysAndAlignMasks) {
  MeanCase m(2, 6);
  int64_t lengths[1] = {3};
  m.t.params.kv_lengths = lengths;
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL; // aligned to 3: row 0 sees 0..1
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
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL; // row 0 sees keys 0, 1
  m.t.V(2, 0, 0) = NAN;                    // seen by row 1 only
  double lse;
  EXPECT_FALSE(std::isnan(m.t.Row(0, 0, &lse)[0]));
  EXPECT_TRUE(std::isnan(m.t.Row(0, 1, &lse)[0]));
  EXPECT_FALSE(std::isnan(lse)); // V does not enter lse
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
  for (size_t n = 0; n < t.q.size(); n++)
    t.q[n] = 0.1f * static_cast<float>(n % 7) - 0.3f;
  for (size_t n = 0; n < t.k.size(); n++)
    t.k[n] = 0.2f * static_cast<float>(n % 5) - 0.4f;
  for (size_t n = 0; n < t.v.size(); n++) t.v[n] = static_cast<float>(n);
  t.params.flags = FLASHCPU_FLAG_CAUSAL;
  flashcpu_tensor tq =
      flashcpu_tensor_bshd(t.q.data(), FLASHCPU_DTYPE_F32, 1, 3, 2, 2);
  flashcpu_tensor tk =
      flashcpu_tensor_bshd(t.k.data(), FLASHCPU_DTYPE_F32, 1, 4, 1, 2);
  flashcpu_tensor tv =
      flashcpu_tensor_bshd(t.v.data(), FLASHCPU_DTYPE_F32, 1, 4, 1, 2);
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

// ---- attention sinks: one more key per query head, of value zero --------

// A random-looking f32 row (q, k, v of no pattern), for tests of what must
// not change it.
Tiny Patterned(int64_t L, int64_t S, int64_t Hq, int64_t D) {
  Tiny t(L, S, Hq, 1, D);
  for (size_t n = 0; n < t.q.size(); n++)
    t.q[n] = 0.3f * static_cast<float>(n % 7) - 0.8f;
  for (size_t n = 0; n < t.k.size(); n++)
    t.k[n] = 0.25f * static_cast<float>(n % 5) - 0.45f;
  for (size_t n = 0; n < t.v.size(); n++)
    t.v[n] = static_cast<float>(n % 11) - 4.0f;
  return t;
}

TEST(OracleSinks, SinkOfMinusInfinityChangesNothing) {
  Tiny t = Patterned(3, 5, 2, 3);
  t.params.flags = FLASHCPU_FLAG_CAUSAL; // row 0 sees keys 0..2
  double plain_lse, sink_lse;
  const std::vector<double> plain = t.Row(1, 0, &plain_lse);
  const float sinks[2] = {-INFINITY, -INFINITY};
  t.params.sinks = sinks;
  t.params.sinks_dtype = FLASHCPU_DTYPE_F32;
  EXPECT_EQ(t.Row(1, 0, &sink_lse), plain);
  EXPECT_EQ(sink_lse, plain_lse);
}

// With q = 0 the n visible keys weigh 1 each and the sink e^s: the output
// is mean(V) * n / (n + e^s) and lse = ln(n + e^s).
TEST(OracleSinks, ZeroQueryWeighsSinkAgainstTheVisibleKeys) {
  MeanCase m(3, 4); // causal: row i sees keys 0 .. i + 1
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;
  const float sinks[1] = {0.75f};
  m.t.params.sinks = sinks;
  m.t.params.sinks_dtype = FLASHCPU_DTYPE_F32;
  const double e_s = std::exp(0.75);
  for (int64_t i = 0; i < 3; i++) {
    const double n = static_cast<double>(i + 2);
    double lse;
    EXPECT_NEAR(m.t.Row(0, i, &lse)[0],
                MeanCase::Mean(0, i + 1) * n / (n + e_s), 1e-14)
        << i;
    EXPECT_NEAR(lse, std::log(n + e_s), 1e-14) << i;
  }
}

TEST(OracleSinks, RowThatSeesNoKeyGetsZeroAndTheSinkAsLse) {
  MeanCase m(4, 2); // causal, L > S: rows 0 and 1 see nothing
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL;
  const float sinks[1] = {-2.5f};
  m.t.params.sinks = sinks;
  m.t.params.sinks_dtype = FLASHCPU_DTYPE_F32;
  double lse;
  EXPECT_EQ(m.t.Row(0, 1, &lse)[0], 0.0);
  EXPECT_EQ(lse, -2.5);
  int64_t lengths[1] = {0}; // no keys at all
  m.t.params.kv_lengths = lengths;
  EXPECT_EQ(m.t.Row(0, 3, &lse)[0], 0.0);
  EXPECT_EQ(lse, -2.5);
}

TEST(OracleSinks, OneLogitPerQueryHeadInItsDtype) {
  // GQA 2:1, q = 0, one key of value 1: out = 1 / (1 + e^sink[h]).
  Tiny t(1, 1, 2, 1, 1);
  t.V(0, 0, 0) = 1.0f;
  // f16 0x2e66 is 0.0999755859375 and 0xbe00 is -1.5; bf16 0x3dcd is
  // 0.10009765625 and 0xbfc0 is -1.5 (each the nearest to 0.1, or exact).
  const uint16_t half[2] = {0x2e66, 0xbe00}, bf16[2] = {0x3dcd, 0xbfc0};
  const struct {
    const void *sinks;
    flashcpu_dtype dtype;
    double head0, head1;
  } cases[] = {{half, FLASHCPU_DTYPE_F16, 0.0999755859375, -1.5},
               {bf16, FLASHCPU_DTYPE_BF16, 0.10009765625, -1.5}};
  for (const auto &c : cases) {
    t.params.sinks = c.sinks;
    t.params.sinks_dtype = c.dtype;
    double lse;
    EXPECT_NEAR(t.Row(0, 0, &lse)[0], 1.0 / (1.0 + std::exp(c.head0)), 1e-15)
        << flashcpu_dtype_name(c.dtype);
    EXPECT_NEAR(lse, std::log(1.0 + std::exp(c.head0)), 1e-15);
    EXPECT_NEAR(t.Row(1, 0, &lse)[0], 1.0 / (1.0 + std::exp(c.head1)), 1e-15)
        << flashcpu_dtype_name(c.dtype);
  }
}

TEST(OracleSinks, SinkIsNotScaledCappedOrMasked) {
  // scale 0.5, softcap 1: a key's score 0 stays 0, but the sink 3 is used
  // as it is (not 1.5, not tanh-capped below 1), and the additive mask's
  // -inf on the only key leaves the sink alone in the row.
  Tiny t(1, 1, 1, 1, 1);
  t.params.scale = 0.5f;
  t.params.softcap = 1.0f;
  t.V(0, 0, 0) = 1.0f;
  const float sinks[1] = {3.0f};
  t.params.sinks = sinks;
  t.params.sinks_dtype = FLASHCPU_DTYPE_F32;
  double lse;
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], 1.0 / (1.0 + std::exp(3.0)), 1e-15);
  float mask[1] = {-INFINITY};
  flashcpu_additive_mask additive{mask, {0, 0, 0, 1}};
  t.params.additive_mask = &additive;
  EXPECT_EQ(t.Row(0, 0, &lse)[0], 0.0);
  EXPECT_EQ(lse, 3.0);
}

TEST(OracleSinks, NanSinkIsNanInEveryRowOfItsHead) {
  MeanCase m(3, 2);
  m.t.params.flags = FLASHCPU_FLAG_CAUSAL; // row 0 sees nothing
  const float sinks[1] = {NAN};
  m.t.params.sinks = sinks;
  m.t.params.sinks_dtype = FLASHCPU_DTYPE_F32;
  for (int64_t i = 0; i < 3; i++) {
    double lse;
    EXPECT_TRUE(std::isnan(m.t.Row(0, i, &lse)[0])) << i;
    EXPECT_TRUE(std::isnan(lse)) << i;
  }
}

// ---- ALiBi: -slope[h] * |p - j|, p = i + S_b - L -------------------------

// With q = 0 every score is the bias alone: weights exp(-slope * |p - j|).
double AlibiMean(double slope, int64_t position, int64_t first, int64_t last,
                 double *lse) {
  double sum = 0.0, weighted = 0.0;
  for (int64_t j = first; j <= last; j++) {
    const double w =
        std::exp(-slope * static_cast<double>(std::abs(position - j)));
    sum += w;
    weighted += w * static_cast<double>(j);
  }
  *lse = std::log(sum);
  return weighted / sum;
}

TEST(OracleAlibi, EqualScoresWeighKeysByDistanceFromTheAlignedPosition) {
  MeanCase m(2, 5); // not causal: row 0 at p = 3 also sees key 4
  const float slopes[1] = {0.5f};
  m.t.params.alibi_slopes = slopes;
  double lse, expected_lse;
  for (int64_t i = 0; i < 2; i++) {
    const double expected = AlibiMean(0.5, i + 3, 0, 4, &expected_lse);
    EXPECT_NEAR(m.t.Row(0, i, &lse)[0], expected, 1e-14) << i;
    EXPECT_NEAR(lse, expected_lse, 1e-14) << i;
  }
  // kv_lengths move the position: S_b = 3 puts row 1 at p = 2.
  int64_t lengths[1] = {3};
  m.t.params.kv_lengths = lengths;
  const double expected = AlibiMean(0.5, 2, 0, 2, &expected_lse);
  EXPECT_NEAR(m.t.Row(0, 1, &lse)[0], expected, 1e-14);
  EXPECT_NEAR(lse, expected_lse, 1e-14);
}

TEST(OracleAlibi, AddedAfterSoftcapBesideTheAdditiveMask) {
  // kv length 2, so the row is at p = 1. Key 0: 10 -> 5 tanh(2), then the
  // bias -2 * 1 (not capped) and the mask's 0.5; key 1: 0, at distance 0.
  Tiny t(1, 3, 1, 1, 1);
  int64_t lengths[1] = {2};
  t.params.kv_lengths = lengths;
  t.params.scale = 1.0f;
  t.params.softcap = 5.0f;
  t.Q(0, 0, 0) = 1.0f;
  t.K(0, 0, 0) = 10.0f;
  t.K(1, 0, 0) = 0.0f;
  t.V(0, 0, 0) = 1.0f;
  t.V(1, 0, 0) = 0.0f;
  t.K(2, 0, 0) = t.V(2, 0, 0) = NAN; // past the kv length: never read
  const float slopes[1] = {2.0f};
  t.params.alibi_slopes = slopes;
  float mask[3] = {0.5f, 0.0f, NAN}; // key 2 is past the kv length
  flashcpu_additive_mask additive{mask, {0, 0, 0, 1}};
  t.params.additive_mask = &additive;
  const double s0 = 5.0 * std::tanh(2.0) - 2.0 + 0.5;
  double lse;
  EXPECT_NEAR(t.Row(0, 0, &lse)[0], std::exp(s0) / (std::exp(s0) + 1.0), 1e-14);
  EXPECT_NEAR(lse, std::log(std::exp(s0) + 1.0), 1e-14);
}

TEST(OracleAlibi, SlopesPerBatchAndHeadThroughTheBatchStride) {
  // B = 2, Hq = 2, L = 1, S = 2, q = 0, V(j) = j: row at p = 1, key 0 at
  // distance 1 weighs exp(-slope), key 1 weighs 1.
  const int64_t B = 2, S = 2, H = 2;
  std::vector<float> q(static_cast<size_t>(B * H), 0.0f),
      kv(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < S; j++)
      kv[static_cast<size_t>(b * S + j)] = static_cast<float>(j);
  flashcpu_tensor tq =
      flashcpu_tensor_bshd(q.data(), FLASHCPU_DTYPE_F32, B, 1, H, 1);
  flashcpu_tensor tkv =
      flashcpu_tensor_bshd(kv.data(), FLASHCPU_DTYPE_F32, B, S, 1, 1);
  // [B, Hq] with a padded row of 3: batch b head h at b * 3 + h.
  const float slopes[6] = {0.25f, 0.5f, NAN, 1.0f, 2.0f, NAN};
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.alibi_slopes = slopes;
  params.alibi_batch_stride = 3;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const double w = std::exp(-static_cast<double>(slopes[b * 3 + h]));
      double out, lse;
      flashcpu_oracle_row(&tq, &tkv, &tkv, &params, b, h, 0, &out, &lse);
      EXPECT_NEAR(out, 1.0 / (1.0 + w), 1e-15) << b << "," << h;
      EXPECT_NEAR(lse, std::log(1.0 + w), 1e-15) << b << "," << h;
    }
  params.alibi_batch_stride = 0; // [Hq] for every batch
  double out, lse;
  flashcpu_oracle_row(&tq, &tkv, &tkv, &params, 1, 1, 0, &out, &lse);
  EXPECT_NEAR(out, 1.0 / (1.0 + std::exp(-0.5)), 1e-15);
}

TEST(OracleNewOptions, StructOfTheEarlierSizeLeavesSinksAndAlibiUnset) {
  Tiny t = Patterned(2, 3, 1, 2);
  double plain_lse, old_lse;
  const std::vector<double> plain = t.Row(0, 1, &plain_lse);
  const float sinks[1] = {1.0f}, slopes[1] = {0.5f};
  t.params.sinks = sinks;
  t.params.sinks_dtype = FLASHCPU_DTYPE_F32;
  t.params.alibi_slopes = slopes;
  t.params.struct_size = offsetof(flashcpu_attention_params, sinks);
  EXPECT_EQ(t.Row(0, 1, &old_lse), plain);
  EXPECT_EQ(old_lse, plain_lse);
  t.params.struct_size = sizeof(flashcpu_attention_params);
  EXPECT_NE(t.Row(0, 1, &old_lse), plain); // the fields do count at full size
}

TEST(OracleLoad, DecodesF16AndBf16ExactlyThroughStrides) {
  // f16: 1, -2, 2^-24 (smallest subnormal), 65504, inf; bf16: 1, 2^-133, -0.
  const uint16_t half[5] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
  const double half_values[5] = {1.0, -2.0, std::ldexp(1.0, -24), 65504.0,
                                 INFINITY};
  flashcpu_tensor t = flashcpu_tensor_bshd(const_cast<uint16_t *>(half),
                                           FLASHCPU_DTYPE_F16, 1, 5, 1, 1);
  for (int64_t s = 0; s < 5; s++)
    EXPECT_EQ(flashcpu_oracle_load(&t, 0, s, 0, 0), half_values[s]) << s;
  const uint16_t half_nan = 0x7e01;
  flashcpu_tensor nan_view = flashcpu_tensor_bshd(
      const_cast<uint16_t *>(&half_nan), FLASHCPU_DTYPE_F16, 1, 1, 1, 1);
  EXPECT_TRUE(std::isnan(flashcpu_oracle_load(&nan_view, 0, 0, 0, 0)));

  const uint16_t bf16[3] = {0x3f80, 0x0001, 0x8000};
  t = flashcpu_tensor_bshd(const_cast<uint16_t *>(bf16), FLASHCPU_DTYPE_BF16, 1,
                           3, 1, 1);
  EXPECT_EQ(flashcpu_oracle_load(&t, 0, 0, 0, 0), 1.0);
  EXPECT_EQ(flashcpu_oracle_load(&t, 0, 1, 0, 0), std::ldexp(1.0, -133));
  EXPECT_TRUE(std::signbit(flashcpu_oracle_load(&t, 0, 2, 0, 0)));

  // Strides: element (b, s, h, d) at b*100 + s*10 + h*3 + d.
  std::vector<float> data(300);
  for (size_t n = 0; n < data.size(); n++) data[n] = static_cast<float>(n);
  flashcpu_tensor strided{
      data.data(), FLASHCPU_DTYPE_F32, {2, 5, 3, 3}, {100, 10, 3, 1}};
  EXPECT_EQ(flashcpu_oracle_load(&strided, 1, 4, 2, 1), 100 + 40 + 6 + 1);
}

} // namespace
