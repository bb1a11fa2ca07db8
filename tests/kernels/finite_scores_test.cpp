// Finite scores stay finite, on every kernel of the registry: scores and
// masks near the ends of the float range, where the log2(e) product that
// every kernel applies before exp2 would overflow, saturate at
// +-FLT_MAX in the log2 domain (flashcpu.h, "Numerics") instead of turning
// into +-inf. A -FLT_MAX mask on every key (the value Hugging Face models
// use) gives the uniform softmax, never the empty row (0, -inf); a +3e38
// bias selects its key, never NaN; so does a score of 3e38 from the scale.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32;
constexpr int64_t kHq = 2, kHkv = 1;
const int64_t kKeyCounts[] = {1, 2, 15, 16, 17, 33, 300};
const int64_t kRowCounts[] = {1, 4};

class FiniteScores : public KernelSuite<flashcpu_dtype> {
protected:
  AttentionCase &Configure(AttentionCase &c, int64_t rows, int64_t keys,
                           int64_t dim) {
    const flashcpu_dtype t = test_case();
    return c.batch(1)
        .q_len(rows)
        .kv_len(keys)
        .heads(kHq, kHkv)
        .head_dim(dim)
        .dtypes(t, t, F32)
        .seed(static_cast<uint64_t>(keys * 10 + rows));
  }
};

std::string Where(int64_t rows, int64_t keys) {
  return std::to_string(rows) + " rows, " + std::to_string(keys) + " keys";
}

// Output row (0, i, h) is the mean of V over every key; lse is finite.
void ExpectUniform(AttentionCase &c, int64_t rows, int64_t keys, int64_t dv) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t h = 0; h < kHq; h++) {
      for (int64_t d = 0; d < dv; d++) {
        double mean = 0, largest = 0;
        for (int64_t j = 0; j < keys; j++) {
          const double x = c.v().Get(0, j, h / (kHq / kHkv), d);
          mean += x / static_cast<double>(keys);
          largest = std::max(largest, std::fabs(x));
        }
        EXPECT_NEAR(c.out_at(0, i, h, d), mean, 1e-5 * largest + 1e-30)
            << "row " << i << " head " << h << " column " << d;
      }
      EXPECT_TRUE(std::isfinite(c.lse_at(0, h, i)))
          << "row " << i << " head " << h;
    }
}

// Output row (0, i, h) is key `key`'s value row exactly; lse is finite.
void ExpectSelects(AttentionCase &c, int64_t i, int64_t key, int64_t dv) {
  for (int64_t h = 0; h < kHq; h++) {
    for (int64_t d = 0; d < dv; d++)
      EXPECT_EQ(c.out_at(0, i, h, d), c.v().Get(0, key, h / (kHq / kHkv), d))
          << "row " << i << " head " << h << " column " << d;
    EXPECT_TRUE(std::isfinite(c.lse_at(0, h, i)))
        << "row " << i << " head " << h;
  }
}

TEST_P(FiniteScores, MinFloatMaskOnEveryKeyGivesTheUniformSoftmax) {
  for (int64_t rows : kRowCounts)
    for (int64_t keys : kKeyCounts) {
      SCOPED_TRACE(Where(rows, keys));
      AttentionCase c;
      Configure(c, rows, keys, 16)
          .additive(AdditivePattern::kFull, 0.0)
          .Build();
      for (int64_t h = 0; h < kHq; h++)
        for (int64_t i = 0; i < rows; i++)
          for (int64_t j = 0; j < keys; j++)
            c.additive_at(0, h, i, j) = -FLT_MAX;
      if (!RunOk(c)) return;
      ExpectUniform(c, rows, keys, 16);
      EXPECT_LE(c.lse_at(0, 0, 0), -2e38f);
    }
}

TEST_P(FiniteScores, HugeBiasSelectsItsKey) {
  for (int64_t rows : kRowCounts)
    for (int64_t keys : kKeyCounts) {
      SCOPED_TRACE(Where(rows, keys));
      AttentionCase c;
      Configure(c, rows, keys, 16)
          .additive(AdditivePattern::kFull, 0.0)
          .Build();
      for (int64_t h = 0; h < kHq; h++)
        for (int64_t i = 0; i < rows; i++) {
          for (int64_t j = 0; j < keys; j++) c.additive_at(0, h, i, j) = 0.0f;
          c.additive_at(0, h, i, (i * 7 + 3) % keys) = 3e38f;
        }
      if (!RunOk(c)) return;
      for (int64_t i = 0; i < rows; i++)
        ExpectSelects(c, i, (i * 7 + 3) % keys, 16);
      EXPECT_GE(c.lse_at(0, 0, 0), 2e38f);
    }
}

// head_dim 2 (the bf16 pair kernels take even ones), q = (+-1, 0), k = (1,
// 0) except one key of (32768, 0) (exact in every dtype), scale 1e34: scores of
// 1e34 and 3.2768e38, finite, whose log2(e) multiples are not. With
// `with_mask`, a zero additive mask sends the scores through the finishing path
// instead of Q carrying log2(e).
void HugeScoreCase(AttentionCase &c, int64_t rows, int64_t keys,
                   int64_t big_key, double sign, bool with_mask) {
  c.scale(1e34f);
  if (with_mask) c.additive(AdditivePattern::kFull, 0.0);
  c.Build();
  for (int64_t i = 0; i < rows; i++)
    for (int64_t h = 0; h < kHq; h++) {
      c.q().Set(0, i, h, 0, sign);
      c.q().Set(0, i, h, 1, 0.0);
    }
  for (int64_t j = 0; j < keys; j++) {
    c.k().Set(0, j, 0, 0, j == big_key ? 32768.0 : 1.0);
    c.k().Set(0, j, 0, 1, 0.0);
  }
  if (with_mask)
    for (int64_t h = 0; h < kHq; h++)
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < keys; j++) c.additive_at(0, h, i, j) = 0.0f;
}

TEST_P(FiniteScores, HugeScoreSelectsItsKey) {
  for (bool with_mask : {false, true})
    for (int64_t rows : kRowCounts)
      for (int64_t keys : kKeyCounts) {
        SCOPED_TRACE(Where(rows, keys) + (with_mask ? ", zero mask" : ""));
        AttentionCase c;
        Configure(c, rows, keys, 2);
        HugeScoreCase(c, rows, keys, keys / 2, 1.0, with_mask);
        if (!RunOk(c)) return;
        for (int64_t i = 0; i < rows; i++) ExpectSelects(c, i, keys / 2, 2);
      }
}

TEST_P(FiniteScores, EqualHugeNegativeScoresGiveTheUniformSoftmax) {
  for (bool with_mask : {false, true})
    for (int64_t rows : kRowCounts)
      for (int64_t keys : kKeyCounts) {
        SCOPED_TRACE(Where(rows, keys) + (with_mask ? ", zero mask" : ""));
        AttentionCase c;
        Configure(c, rows, keys, 2);
        HugeScoreCase(c, rows, keys, -1, -1.0, with_mask);
        for (int64_t j = 0; j < keys; j++) c.k().Set(0, j, 0, 0, 32768.0);
        if (!RunOk(c)) return;
        ExpectUniform(c, rows, keys, 2);
      }
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, FiniteScores,
    testing::ValuesIn(ForEveryKernel<flashcpu_dtype>(
        {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_BF16},
        TakesConfigured<flashcpu_dtype>([](AttentionCase &c,
                                           const flashcpu_dtype &dtype) {
          c.batch(1).q_len(4).kv_len(300).heads(kHq, kHkv).head_dim(16).dtypes(
              dtype, dtype, F32);
        }))),
    KernelParamName<flashcpu_dtype>([](const flashcpu_dtype &dtype) {
      return std::string(flashcpu_dtype_name(dtype));
    }));

} // namespace
} // namespace fctest
