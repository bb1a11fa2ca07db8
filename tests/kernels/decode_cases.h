// Decode shapes (1 to 64 query rows) shared by decode_cases_test.cpp
// (against the oracle) and determinism_test.cpp (bytes across thread
// counts).
#ifndef FLASHCPU_TESTS_KERNELS_DECODE_CASES_H
#define FLASHCPU_TESTS_KERNELS_DECODE_CASES_H

#include <functional>
#include <vector>

#include "attention_case.h"

namespace fctest {
namespace decode_cases {
constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;
} // namespace decode_cases

struct DecodeCase {
  const char *name;
  std::function<void(AttentionCase &)> configure;
};

inline const std::vector<DecodeCase> &DecodeCases() {
  using namespace decode_cases;
  static const std::vector<DecodeCase> cases = {
      {"bf16_d128_gqa4_kv1000",
       [](AttentionCase &c) {
         c.kv_len(1000).heads(8, 2).head_dim(128).dtypes(BF16, BF16, BF16);
       }},
      {"f16_d64_gqa2_kv_lengths_0_1_17_700",
       [](AttentionCase &c) {
         c.batch(4)
             .kv_len(700)
             .heads(4, 2)
             .head_dim(64)
             .dtypes(F16, F16, F32)
             .kv_lengths({0, 1, 17, 700});
       }},
      {"f32_d80_gqa7_padding_slots_cache_layout",
       [](AttentionCase &c) {
         c.batch(2)
             .kv_len(531)
             .heads(7, 1)
             .head_dim(80)
             .layout(Layout::kCache)
             .kv_lengths({531, 300});
       }},
      {"bf16_d256_mqa_large_scores",
       [](AttentionCase &c) {
         c.kv_len(600)
             .heads(4, 1)
             .head_dim(256)
             .dtypes(BF16, BF16, F32)
             .magnitude(Magnitude::kLarge);
       }},
      {"f32_d1_mha",
       [](AttentionCase &c) { c.kv_len(300).heads(3, 3).head_dim(1); }},
      {"f16_d96_v40_window_mid_split",
       [](AttentionCase &c) {
         c.kv_len(2000)
             .heads(8, 2)
             .head_dim(96)
             .v_head_dim(40)
             .dtypes(F16, F16, F16)
             .window(300, -1)
             .layout(Layout::kBHSD);
       }},
      {"bf16_d128_tree_softcap_unaligned",
       [](AttentionCase &c) {
         c.batch(2)
             .kv_len(513)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, BF16)
             .tree(40)
             .softcap(30.0f)
             .layout(Layout::kUnaligned)
             .kv_lengths({513, 257});
       }},
      {"f32_d72_additive_key_padding",
       [](AttentionCase &c) {
         c.batch(2)
             .kv_len(777)
             .heads(6, 3)
             .head_dim(72)
             .additive(AdditivePattern::kKeyPadding, 0.3)
             .kv_lengths({777, 16});
       }},
      {"f32_d128_additive_hides_a_whole_split",
       [](AttentionCase &c) {
         c.kv_len(800).heads(4, 1).head_dim(128).additive(
             AdditivePattern::kFull, 0.97);
       }},
      {"bf16_d64_causal_window_zero",
       [](AttentionCase &c) {
         c.kv_len(400)
             .heads(4, 4)
             .head_dim(64)
             .dtypes(BF16, BF16, BF16)
             .causal()
             .window(0, 0);
       }},
      // Several rows (speculative verification).
      {"rows2_causal_f16_d128",
       [](AttentionCase &c) {
         c.q_len(2)
             .kv_len(650)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(F16, F16, F16)
             .causal();
       }},
      {"rows5_tree_bf16_kv_lengths",
       [](AttentionCase &c) {
         c.batch(3)
             .q_len(5)
             .kv_len(300)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, F32)
             .tree(5)
             .causal()
             .kv_lengths({300, 5, 129});
       }},
      {"rows8_tree_broadcast_gqa7_d64",
       [](AttentionCase &c) {
         c.q_len(8).kv_len(1030).heads(7, 1).head_dim(64).tree(8, 0.5, true);
       }},
      {"rows16_causal_rows_past_kv_length",
       [](AttentionCase &c) {
         c.batch(2)
             .q_len(16)
             .kv_len(520)
             .heads(4, 2)
             .head_dim(80)
             .causal()
             .kv_lengths({520, 7});
       }},
      {"rows33_window_additive_softcap",
       [](AttentionCase &c) {
         c.q_len(33)
             .kv_len(600)
             .heads(2, 1)
             .head_dim(128)
             .window(100, 3)
             .additive(AdditivePattern::kBroadcastHeads)
             .softcap(20.0f);
       }},
      {"rows64_tree_large_bf16",
       [](AttentionCase &c) {
         c.q_len(64)
             .kv_len(700)
             .heads(4, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, BF16)
             .tree(64)
             .magnitude(Magnitude::kLarge);
       }},
      {"rows4_not_causal_mha",
       [](AttentionCase &c) {
         c.q_len(4).kv_len(270).heads(5, 5).head_dim(32);
       }},
      // Ten splits of 256 keys: more than the split launch merges itself, so
      // a merge launch follows (the cases above merge in the split launch).
      {"bf16_kv2500_ten_splits_merge_launch",
       [](AttentionCase &c) {
         c.batch(2)
             .kv_len(2500)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, F32)
             .kv_lengths({2500, 2049});
       }},
  };
  return cases;
}

} // namespace fctest

#endif // FLASHCPU_TESTS_KERNELS_DECODE_CASES_H
