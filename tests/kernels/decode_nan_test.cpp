// NaN through decode shapes (1 and 4 query rows, keys in several of
// split-KV's splits), on every kernel of the registry: NaN in what a row
// reads (q, a visible K or V row) reaches that row's output, in whichever
// split it lies; NaN in keys the row does not see does not. Each case is
// also compared with the oracle.
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

// 600 keys: three splits of 256 keys (the last partial). GQA 4.
constexpr int64_t kS = 600, kHq = 8, kHkv = 2, kD = 128;

class DecodeNan : public KernelSuite<flashcpu_dtype> {
protected:
  AttentionCase &Configure(AttentionCase &c, int64_t rows) {
    const flashcpu_dtype t = test_case();
    return c.batch(2)
        .q_len(rows)
        .kv_len(kS)
        .heads(kHq, kHkv)
        .head_dim(kD)
        .causal()
        .dtypes(t, t, t)
        .seed(97);
  }
};

// The one row of batch b is NaN (output and lse) for the heads poisoned
// says and finite for the others; the other batch is finite throughout.
template <typename Poisoned>
void ExpectNanHeads(const AttentionCase &c, int64_t b, Poisoned poisoned) {
  for (int64_t h = 0; h < kHq; h++) {
    if (poisoned(h)) {
      EXPECT_TRUE(c.out_row_has_nan(b, 0, h)) << "head " << h;
      EXPECT_TRUE(std::isnan(c.lse_at(b, h, 0))) << "head " << h;
    } else {
      EXPECT_TRUE(c.out_row_finite(b, 0, h)) << "head " << h;
    }
    EXPECT_TRUE(c.out_row_finite(1 - b, 0, h)) << "other batch, head " << h;
  }
}

TEST_P(DecodeNan, NanQueryPoisonsOnlyThatHead) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.q().Set(1, 0, 5, 100, NAN);
  if (!Check(c)) return;
  ExpectNanHeads(c, 1, [](int64_t h) { return h == 5; });
}

TEST_P(DecodeNan, NanKeyInAMiddleSplitPoisonsItsGroup) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.k().Set(0, 300, 1, 64, NAN); // split 1, kv head 1: q heads 4..7
  if (!Check(c)) return;
  ExpectNanHeads(c, 0, [](int64_t h) { return h / 4 == 1; });
}

TEST_P(DecodeNan, NanValuePoisonsThatElement) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.v().Set(0, 520, 0, 7, NAN); // split 2, kv head 0: q heads 0..3
  if (!Check(c)) return;
  for (int64_t h = 0; h < kHq; h++) {
    EXPECT_EQ(std::isnan(c.out_at(0, 0, h, 7)), h < 4) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.out_at(0, 0, h, 6))) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.lse_at(0, h, 0))) << "V does not enter lse";
  }
}

// An infinite value stays in its element: kernels whose products pair
// neighbouring elements (the AMX-BF16 one) must not leak it as NaN.
TEST_P(DecodeNan, InfiniteValueStaysInThatElement) {
  AttentionCase c;
  Configure(c, 1).Build();
  c.v().Set(0, 520, 0, 9, INFINITY); // split 2, kv head 0: q heads 0..3
  if (!Check(c)) return;
  for (int64_t h = 0; h < kHq; h++) {
    EXPECT_EQ(std::isinf(c.out_at(0, 0, h, 9)), h < 4) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.out_at(0, 0, h, 8))) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.out_at(0, 0, h, 10))) << "head " << h;
  }
}

TEST_P(DecodeNan, HiddenKeysAreIgnoredAcrossRows) {
  // 4 rows, causal: row i sees keys up to kS - 4 + i; batch 1 holds 400
  // keys, and the rows after them are not part of the call.
  AttentionCase c;
  Configure(c, 4).kv_lengths({kS, 400}).Build();
  for (int64_t d = 0; d < kD; d++) {
    c.k().Set(0, kS - 1, 0, d, NAN); // seen by row 3 only
    c.v().Set(0, kS - 1, 0, d, NAN);
    c.k().Set(1, 450, 1, d, NAN); // past batch 1's length
    c.v().Set(1, 450, 1, d, NAN);
  }
  if (!Check(c)) return;
  for (int64_t i = 0; i < 4; i++)
    for (int64_t h = 0; h < kHq; h++) {
      if (i == 3 && h < 4) {
        EXPECT_TRUE(c.out_row_has_nan(0, i, h)) << "row " << i << " head " << h;
      } else {
        EXPECT_TRUE(c.out_row_finite(0, i, h)) << "row " << i << " head " << h;
      }
      EXPECT_TRUE(c.out_row_finite(1, i, h))
          << "batch 1 row " << i << " head " << h;
    }
}

// Every key count around the kernels' 16-key blocks, D = 1: NaN in q, in
// the one visible key (window (0, 0)) or in its value gives NaN, never the
// empty row (0, -inf) that max instructions dropping NaN once produced.
TEST_P(DecodeNan, NanNeverBecomesAnEmptyRowAtAnyKeyCount) {
  const flashcpu_dtype t = test_case();
  for (int64_t keys = 1; keys <= 33; keys++)
    for (int where = 0; where < 3; where++) {
      SCOPED_TRACE("keys " + std::to_string(keys) + ", NaN in " +
                   (where == 0   ? "q"
                    : where == 1 ? "k"
                                 : "v"));
      AttentionCase c;
      c.batch(1)
          .q_len(1)
          .kv_len(keys)
          .heads(1, 1)
          .head_dim(1)
          .dtypes(t, t, t)
          .seed(static_cast<uint64_t>(keys));
      if (where > 0) c.causal().window(0, 0);
      c.Build();
      if (where == 0) c.q().Set(0, 0, 0, 0, NAN);
      if (where == 1) c.k().Set(0, keys - 1, 0, 0, NAN);
      if (where == 2) c.v().Set(0, keys - 1, 0, 0, NAN);
      if (!Check(c)) return;
      EXPECT_TRUE(std::isnan(c.out_at(0, 0, 0, 0)));
      if (where < 2) {
        EXPECT_TRUE(std::isnan(c.lse_at(0, 0, 0)));
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, DecodeNan,
    testing::ValuesIn(ForEveryKernel<flashcpu_dtype>(
        {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_BF16},
        TakesConfigured<flashcpu_dtype>([](AttentionCase &c,
                                           const flashcpu_dtype &dtype) {
          c.batch(2).q_len(4).kv_len(kS).heads(kHq, kHkv).head_dim(kD).dtypes(
              dtype, dtype, dtype);
        }))),
    KernelParamName<flashcpu_dtype>([](const flashcpu_dtype &dtype) {
      return std::string(flashcpu_dtype_name(dtype));
    }));

} // namespace
} // namespace fctest
