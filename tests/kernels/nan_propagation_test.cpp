// NaN in what a row reads (its q row, a visible k or v row, a visible
// additive-mask value) reaches that row's output, and only that row's; NaN
// in a key the row does not see (masked, or past its kv length) does not.
// Every case is also compared with the oracle element by element.
#include <cmath>
#include <cstdint>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr int64_t kL = 70, kS = 100, kHq = 4, kHkv = 2, kD = 16;
constexpr int64_t kOffset = kS - kL; // causal: row i sees keys j <= i + 30

// Causal, GQA 2, two batches, the q rows spanning two tiles.
AttentionCase &Configure(AttentionCase &c, flashcpu_dtype dtype) {
  return c.batch(2)
      .q_len(kL)
      .kv_len(kS)
      .heads(kHq, kHkv)
      .head_dim(kD)
      .causal()
      .dtypes(dtype, dtype, dtype)
      .seed(83);
}

using NanPropagation = KernelSuite<flashcpu_dtype>;

TEST_P(NanPropagation, NanQueryRowPoisonsOnlyThatRow) {
  AttentionCase c;
  Configure(c, test_case()).Build();
  c.q().Set(1, 40, 3, 5, NAN);
  if (!Check(c)) return;
  EXPECT_TRUE(c.out_row_has_nan(1, 40, 3));
  EXPECT_TRUE(std::isnan(c.lse_at(1, 3, 40)));
  EXPECT_TRUE(c.out_row_finite(1, 40, 2))
      << "same row, the other head of the group";
  EXPECT_TRUE(c.out_row_finite(1, 39, 3)) << "same head, previous row";
  EXPECT_TRUE(c.out_row_finite(0, 40, 3)) << "same row and head, other batch";
}

TEST_P(NanPropagation, NanVisibleKeyPoisonsTheRowsThatSeeIt) {
  AttentionCase c;
  Configure(c, test_case()).Build();
  const int64_t key = 50; // first seen by row 50 - 30 = 20
  c.k().Set(0, key, 1, 0, NAN);
  if (!Check(c)) return;
  for (int64_t i = 0; i < kL; i++)
    for (int64_t h = 0; h < kHq; h++) {
      const bool sees = h / 2 == 1 && key <= i + kOffset;
      if (sees) {
        EXPECT_TRUE(c.out_row_has_nan(0, i, h)) << "row " << i << " head " << h;
        EXPECT_TRUE(std::isnan(c.lse_at(0, h, i)))
            << "row " << i << " head " << h;
      } else {
        EXPECT_TRUE(c.out_row_finite(0, i, h)) << "row " << i << " head " << h;
      }
    }
}

TEST_P(NanPropagation, NanVisibleValuePoisonsThatElementOfTheRowsThatSeeIt) {
  AttentionCase c;
  Configure(c, test_case()).Build();
  const int64_t key = 64; // first key of the second KV block
  c.v().Set(0, key, 0, 7, NAN);
  if (!Check(c)) return;
  for (int64_t i = 0; i < kL; i++)
    for (int64_t h = 0; h < 2; h++) {
      const bool sees = key <= i + kOffset;
      EXPECT_EQ(std::isnan(c.out_at(0, i, h, 7)), sees)
          << "row " << i << " head " << h;
      EXPECT_TRUE(std::isfinite(c.out_at(0, i, h, 6)))
          << "row " << i << " head " << h;
      EXPECT_TRUE(std::isfinite(c.lse_at(0, h, i))) << "V does not enter lse";
    }
}

TEST_P(NanPropagation, NanInKeysARowDoesNotSeeIsIgnored) {
  AttentionCase c;
  Configure(c, test_case()).kv_lengths({kS, 80}).tree(10, 0.6).Build();
  // Batch 0: the newest key, which causal hides from every row but the
  // last; batch 1: a row past its kv length is not even part of the call.
  for (int64_t d = 0; d < kD; d++) {
    c.k().Set(0, kS - 1, 0, d, NAN);
    c.v().Set(0, kS - 1, 0, d, NAN);
    c.k().Set(1, 85, 1, d, NAN);
    c.v().Set(1, 85, 1, d, NAN);
  }
  // The tree covers keys 90..99 of batch 0 and 70..79 of batch 1. Row 69
  // of batch 0 does see key 99; row 69 of batch 1 (position 79) does not see
  // key 75, whose tree bit is cleared, and rows below 65 are causally before
  // it.
  c.set_tree_bit(0, kL - 1, 9, true);
  c.set_tree_bit(1, kL - 1, 5, false);
  for (int64_t d = 0; d < kD; d++) {
    c.k().Set(1, 75, 0, d, NAN);
    c.v().Set(1, 75, 0, d, NAN);
  }
  if (!Check(c)) return;
  for (int64_t i = 0; i < kL - 1; i++)
    EXPECT_TRUE(c.out_row_finite(0, i, 0)) << "row " << i;
  EXPECT_TRUE(
      c.out_row_has_nan(0, kL - 1, 0)); // the last row does see key S - 1
  // Rows 65..68 see key 75 when their random tree bit says so (the oracle
  // comparison covers them); every other row of batch 1 is finite.
  for (int64_t i = 0; i < kL; i++)
    for (int64_t h = 0; h < kHq; h++)
      if (!(h < 2 && i >= 65 && i < kL - 1)) {
        EXPECT_TRUE(c.out_row_finite(1, i, h)) << "row " << i;
      }
}

TEST_P(NanPropagation, NanVisibleAdditiveValuePoisonsThatRow) {
  AttentionCase c;
  Configure(c, test_case()).additive(AdditivePattern::kFull, 0.0).Build();
  c.additive_at(0, 2, 33, 12) = NAN; // key 12 <= 33 + 30: visible
  c.additive_at(0, 1, 10, 90) = NAN; // key 90 > 10 + 30: causally hidden
  if (!Check(c)) return;
  EXPECT_TRUE(c.out_row_has_nan(0, 33, 2));
  EXPECT_TRUE(std::isnan(c.lse_at(0, 2, 33)));
  EXPECT_TRUE(c.out_row_finite(0, 33, 3));
  EXPECT_TRUE(c.out_row_finite(0, 10, 1));
}

TEST_P(NanPropagation, MinusInfinityAdditiveHidesNanValue) {
  // A key whose final score is -inf contributes nothing, NaN V included.
  AttentionCase c;
  Configure(c, test_case()).additive(AdditivePattern::kKeyPadding, 0.0).Build();
  for (int64_t i = 0; i < kL; i++) c.additive_at(0, 0, i, 20) = -INFINITY;
  for (int64_t d = 0; d < kD; d++) c.v().Set(0, 20, 0, d, NAN);
  if (!Check(c)) return;
  for (int64_t i = 0; i < kL; i++)
    EXPECT_TRUE(c.out_row_finite(0, i, 0)) << "row " << i;
}

// The additive mask's -inf is a mask ("-INFINITY hides a key"; "a key is
// visible when every given mask lets it through"), so a key it hides is not
// read, like a key hidden by causal or the tree mask: NaN in that key's k
// row must not reach the row, and a row whose every key the additive mask
// hides is fully masked (0 and -inf, never NaN) even with a NaN q row.
TEST_P(NanPropagation, MinusInfinityAdditiveHidesNanKey) {
  AttentionCase c;
  Configure(c, test_case()).additive(AdditivePattern::kKeyPadding, 0.0).Build();
  for (int64_t i = 0; i < kL; i++) c.additive_at(0, 0, i, 20) = -INFINITY;
  for (int64_t d = 0; d < kD; d++) c.k().Set(0, 20, 0, d, NAN);
  if (!Check(c)) return;
  for (int64_t i = 0; i < kL; i++)
    EXPECT_TRUE(c.out_row_finite(0, i, 0)) << "row " << i;
}

TEST_P(NanPropagation, NanQueryInRowHiddenByAdditiveMaskGivesEmptyRow) {
  AttentionCase c;
  Configure(c, test_case()).additive(AdditivePattern::kFull, 0.0).Build();
  for (int64_t j = 0; j < kS; j++) c.additive_at(0, 0, 5, j) = -INFINITY;
  c.q().Set(0, 5, 0, 0, NAN);
  if (!Check(c)) return;
  for (int64_t d = 0; d < kD; d++) EXPECT_EQ(c.out_at(0, 5, 0, d), 0.0);
  EXPECT_EQ(c.lse_at(0, 0, 5), -INFINITY);
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, NanPropagation,
    testing::ValuesIn(ForEveryKernel<flashcpu_dtype>(
        {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_BF16},
        TakesConfigured<flashcpu_dtype>([](AttentionCase &c,
                                           const flashcpu_dtype &dtype) {
          Configure(c, dtype);
        }))),
    KernelParamName<flashcpu_dtype>([](const flashcpu_dtype &dtype) {
      return std::string(flashcpu_dtype_name(dtype));
    }));

} // namespace
} // namespace fctest
