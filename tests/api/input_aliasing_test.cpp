// Inputs may overlap each other; only out and lse must stay apart from
// them. A kernel that assumes distinct inputs (say, converting K and V into
// one shared buffer, or caching q rows by address) breaks here.
#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

TEST(InputAliasing, ValuesAreTheKeys) {
  AttentionCase()
      .batch(2)
      .q_len(40)
      .kv_len(130)
      .heads(4, 2)
      .head_dim(64)
      .dtypes(F16, F16, F32)
      .causal()
      .values_alias_keys()
      .seed(5)
      .Test();
}

TEST(InputAliasing, AllQueryRowsReadOneRow) {
  // Same query everywhere: rows differ only by what their masks let in.
  AttentionCase()
      .batch(2)
      .q_len(70)
      .kv_len(100)
      .heads(3, 3)
      .head_dim(72)
      .dtypes(BF16, BF16, BF16)
      .window(10, 0)
      .queries_share_one_row()
      .seed(6)
      .Test();
}

TEST(InputAliasing, BothWithKvLengthsAndLargeScores) {
  AttentionCase()
      .batch(3)
      .q_len(9)
      .kv_len(200)
      .heads(8, 1)
      .head_dim(100)
      .dtypes(F32, F32, F16)
      .causal()
      .kv_lengths({200, 64, 3})
      .values_alias_keys()
      .queries_share_one_row()
      .magnitude(Magnitude::kLarge)
      .seed(7)
      .Test();
}

} // namespace
} // namespace fctest
