// Dtype mixes, odd head_dims and masks that stress each ISA's code (its
// kernels and its f16/bf16 row converters), against the oracle on every
// kernel of the registry that takes them.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

struct IsaCase {
  const char *name;
  std::function<void(AttentionCase &)> configure;
};

const IsaCase kIsaCases[] = {
    {"f16_d72_causal_gqa4",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(70)
           .kv_len(130)
           .heads(8, 2)
           .head_dim(72)
           .dtypes(F16, F16, F16)
           .causal();
     }},
    {"bf16_d100_window_additive_large",
     [](AttentionCase &c) {
       c.q_len(33)
           .kv_len(200)
           .heads(3, 3)
           .head_dim(100)
           .dtypes(BF16, BF16, BF16)
           .window(40, 2)
           .additive(AdditivePattern::kBroadcastHeads)
           .magnitude(Magnitude::kLarge);
     }},
    {"f32_to_f16_d1_mqa_tree",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(9)
           .kv_len(100)
           .heads(7, 1)
           .head_dim(1)
           .dtypes(F32, F32, F16)
           .tree(70);
     }},
    {"mixed_d256_softcap_kv_lengths_unaligned",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(17)
           .kv_len(90)
           .heads(4, 2)
           .head_dim(256)
           .dtypes(BF16, F16, F32, BF16)
           .softcap(0.5f)
           .kv_lengths({90, 41})
           .layout(Layout::kUnaligned);
     }},
    {"f16_d80_decode_cache",
     [](AttentionCase &c) {
       c.batch(3)
           .q_len(1)
           .kv_len(300)
           .heads(14, 2)
           .head_dim(80)
           .dtypes(F16, F16, F32)
           .layout(Layout::kCache)
           .kv_lengths({300, 1, 257});
     }},
    {"f32_group_65_one_row_per_tile", // more heads per group than rows per tile
     [](AttentionCase &c) {
       c.q_len(5).kv_len(100).heads(65, 1).head_dim(16).causal().window(20, -1);
     }},
    {"bf16_d96_v_dim_differs",
     [](AttentionCase &c) {
       c.q_len(65)
           .kv_len(65)
           .heads(2, 1)
           .head_dim(96)
           .v_head_dim(40)
           .dtypes(BF16, BF16, F32)
           .causal()
           .layout(Layout::kBHSD);
     }},
};

using KernelCoverage = KernelSuite<const IsaCase *>;

TEST_P(KernelCoverage, MatchesOracle) {
  AttentionCase c;
  test_case()->configure(c);
  c.seed(29);
  if (!Check(c)) return;
  EXPECT_EQ(flashcpu_context_isa(ctx()), kernel()->isa);
}

std::vector<const IsaCase *> CasePointers() {
  std::vector<const IsaCase *> cases;
  for (const IsaCase &c : kIsaCases) cases.push_back(&c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KernelCoverage,
    testing::ValuesIn(ForEveryKernel<const IsaCase *>(
        CasePointers(), TakesConfigured<const IsaCase *>(
                            [](AttentionCase &c, const IsaCase *const &p) {
                              p->configure(c);
                            }))),
    KernelParamName<const IsaCase *>([](const IsaCase *const &p) {
      return std::string(p->name);
    }));

} // namespace
} // namespace fctest
