// Rows that see no key must give output 0 and lse -inf, never NaN, wherever
// they fall: in the first, a middle or the last query tile (the kernel
// tiles 64 / group query rows), by tree mask, additive mask, causal
// alignment or a kv length of 0. Rows whose visible keys start or stop at
// a KV block boundary exercise merging a state with an empty (-inf) side.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

void ExpectRowEmpty(const AttentionCase &c, int64_t b, int64_t i, int64_t h,
                    int64_t v_head_dim) {
  for (int64_t d = 0; d < v_head_dim; d++)
    ASSERT_EQ(c.out_at(b, i, h, d), 0.0)
        << "b=" << b << " i=" << i << " h=" << h << " d=" << d;
  ASSERT_EQ(c.lse_at(b, h, i), -INFINITY)
      << "b=" << b << " i=" << i << " h=" << h;
}

using FullyMaskedRows = KernelOnly;
using EmptyStateMerging = KernelOnly;

struct TileLayout {
  int64_t q_heads, kv_heads, q_len;
};
// Group 1: tiles of 64 rows; group 4: 16 rows; group 7: 9 rows.
const TileLayout kTileLayouts[] = {{2, 2, 200}, {8, 2, 50}, {7, 1, 30}};

std::vector<int64_t> FirstMiddleLastRows(const TileLayout &t) {
  return {0, t.q_len / 2, t.q_len - 1};
}

TEST_P(FullyMaskedRows, TreeMaskInFirstMiddleAndLastTile) {
  for (const TileLayout &t : kTileLayouts)
    for (flashcpu_dtype out : {F32, F16, BF16}) {
      AttentionCase c;
      // The tree covers every key, so a row with no bits sees nothing.
      c.batch(2)
          .q_len(t.q_len)
          .kv_len(130)
          .heads(t.q_heads, t.kv_heads)
          .head_dim(24)
          .dtypes(F16, F16, out)
          .tree(130, 0.5)
          .seed(31);
      c.Build();
      for (int64_t b = 0; b < 2; b++)
        for (int64_t i : FirstMiddleLastRows(t))
          for (int64_t key = 0; key < 130; key++)
            c.set_tree_bit(b, i, key, false);
      if (!Check(c)) continue;
      for (int64_t b = 0; b < 2; b++)
        for (int64_t i : FirstMiddleLastRows(t))
          for (int64_t h = 0; h < t.q_heads; h++)
            ExpectRowEmpty(c, b, i, h, 24);
    }
}

TEST_P(FullyMaskedRows, AdditiveMaskInFirstMiddleAndLastTile) {
  for (const TileLayout &t : kTileLayouts) {
    AttentionCase c;
    c.q_len(t.q_len)
        .kv_len(70)
        .heads(t.q_heads, t.kv_heads)
        .head_dim(40)
        .additive(AdditivePattern::kFull, 0.05)
        .softcap(2.0f)
        .seed(37);
    c.Build();
    // Hide every key from the chosen rows of head 1 only: head 0 of the
    // same rows must be unaffected.
    for (int64_t i : FirstMiddleLastRows(t))
      for (int64_t j = 0; j < 70; j++) c.additive_at(0, 1, i, j) = -INFINITY;
    if (!Check(c)) continue;
    for (int64_t i : FirstMiddleLastRows(t)) {
      ExpectRowEmpty(c, 0, i, 1, 40);
      EXPECT_NE(c.lse_at(0, 0, i), -INFINITY) << "row " << i << " head 0";
    }
  }
}

// Bottom-right causal with L > S: rows i < L - S see nothing. With group 2
// (32-row tiles) and L - S = 130, whole tiles and part of one are empty.
TEST_P(FullyMaskedRows, CausalRowsBeforeTheFirstKey) {
  AttentionCase c;
  c.batch(2)
      .q_len(150)
      .kv_len(20)
      .heads(4, 2)
      .head_dim(16)
      .causal()
      .dtypes(BF16, BF16, F32)
      .seed(41);
  if (!Check(c)) return;
  for (int64_t b = 0; b < 2; b++)
    for (int64_t i = 0; i < 150; i++)
      for (int64_t h = 0; h < 4; h++) {
        if (i < 130) {
          ExpectRowEmpty(c, b, i, h, 16);
        } else {
          EXPECT_NE(c.lse_at(b, h, i), -INFINITY)
              << "row " << i << " sees key " << i - 130;
        }
      }
}

TEST_P(FullyMaskedRows, WindowPastTheKeys) {
  // Right window 2 with L - S = 70: rows i < 68 see nothing.
  AttentionCase c;
  c.q_len(100).kv_len(30).heads(3, 3).head_dim(8).window(1, 2).seed(43);
  if (!Check(c)) return;
  for (int64_t i = 0; i < 100; i++) {
    if (i < 68) {
      ExpectRowEmpty(c, 0, i, 2, 8);
    } else {
      EXPECT_NE(c.lse_at(0, 2, i), -INFINITY) << "row " << i;
    }
  }
}

TEST_P(FullyMaskedRows, KvLengthZeroForOneBatch) {
  for (bool causal : {false, true}) {
    AttentionCase c;
    c.batch(3)
        .q_len(70)
        .kv_len(90)
        .heads(4, 1)
        .head_dim(64)
        .causal(causal)
        .kv_lengths({90, 0, 33})
        .dtypes(F16, BF16, F16)
        .seed(47);
    if (!Check(c)) continue;
    for (int64_t i = 0; i < 70; i++)
      for (int64_t h = 0; h < 4; h++) ExpectRowEmpty(c, 1, i, h, 64);
  }
}

TEST_P(FullyMaskedRows, EmptyKeyValueViews) {
  // S = 0: k and v have no rows at all; every row is empty.
  for (flashcpu_dtype out : {F32, F16, BF16}) {
    AttentionCase c;
    c.batch(2)
        .q_len(65)
        .kv_len(0)
        .heads(6, 3)
        .head_dim(100)
        .dtypes(F32, F32, out)
        .seed(53);
    if (!Check(c)) continue;
    for (int64_t b = 0; b < 2; b++)
      for (int64_t i = 0; i < 65; i++)
        for (int64_t h = 0; h < 6; h++) ExpectRowEmpty(c, b, i, h, 100);
  }
}

// The online softmax starts every row from an empty (-inf) state and folds
// in one 64-key block at a time. Rows whose first visible key is deep in a
// later block, or whose blocks after the first are all hidden, must merge
// an empty side without NaN from -inf - (-inf).
TEST_P(EmptyStateMerging, VisibleKeysOnlyInALaterBlock) {
  AttentionCase c;
  c.q_len(8)
      .kv_len(200)
      .heads(2, 2)
      .head_dim(16)
      .additive(AdditivePattern::kFull, 0.0)
      .seed(59);
  c.Build();
  for (int64_t h = 0; h < 2; h++)
    for (int64_t i = 0; i < 8; i++)
      for (int64_t j = 0; j < 200; j++) {
        // Row i sees only keys from 128 + 9 * i on (the last block at most).
        if (j < 128 + 9 * i) c.additive_at(0, h, i, j) = -INFINITY;
      }
  if (!Check(c)) return;
}

TEST_P(EmptyStateMerging, LaterBlocksFullyHidden) {
  AttentionCase c;
  c.q_len(8).kv_len(200).heads(2, 1).head_dim(16).tree(136, 0.5).seed(61);
  c.Build();
  // The tree covers keys 64..199; row i keeps only bit i: key 64 + i. Key
  // blocks 1 to 3 are then all hidden but one key.
  for (int64_t i = 0; i < 8; i++)
    for (int64_t key = 0; key < 136; key++) c.set_tree_bit(0, i, key, key == i);
  if (!Check(c)) return;
}

TEST_P(EmptyStateMerging, OnlyTheLastKeyVisible) {
  for (int64_t kv_len : {1, 63, 64, 65, 128, 129}) {
    AttentionCase c;
    c.q_len(3).kv_len(kv_len).heads(2, 2).head_dim(8).window(0, 0).seed(67);
    if (!Check(c))
      continue; // the last row sees only key S - 1, the others one key each
  }
}

TEST_P(EmptyStateMerging, LargeNegativeScoresDoNotUnderflowToEmpty) {
  // Every visible score near -300: exp of the raw score underflows, but the
  // max-subtracted weights do not; the rows are not empty.
  AttentionCase c;
  c.q_len(16)
      .kv_len(100)
      .heads(2, 2)
      .head_dim(32)
      .magnitude(Magnitude::kLarge)
      .seed(71);
  c.Build();
  for (int64_t j = 0; j < 100; j++)
    for (int64_t d = 0; d < 32; d++)
      c.k().Set(0, j, 0, d, std::fabs(c.k().Get(0, j, 0, d)));
  for (int64_t i = 0; i < 16; i++)
    for (int64_t d = 0; d < 32; d++)
      c.q().Set(0, i, 0, d, -std::fabs(c.q().Get(0, i, 0, d)));
  if (!Check(c)) return;
  for (int64_t i = 0; i < 16; i++)
    EXPECT_LT(c.lse_at(0, 0, i), -50.0) << "row " << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, FullyMaskedRows,
                         testing::ValuesIn(ForEveryKernel()), KernelOnlyName);
INSTANTIATE_TEST_SUITE_P(Kernels, EmptyStateMerging,
                         testing::ValuesIn(ForEveryKernel()), KernelOnlyName);

} // namespace
} // namespace fctest
