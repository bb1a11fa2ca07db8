// bf16 cases against the oracle on every kernel of the registry that takes
// them: the AVX512-BF16 dot-product rows (split-KV scores and prefill Q.K
// by VDPBF16PS) and every other row, which widens bf16 to f32. They aim at
// the dot-product kernels' shapes: Llama3 decode with partial splits and
// blocks, every specialised head_dim and a generic one, mixed and empty kv
// lengths, several rows with masks and softcap, GQA remainders. A case
// with f32 q (which the bf16-dot rows do not take) keeps the widening path
// of the others honest.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16, F32 = FLASHCPU_DTYPE_F32;

struct Bf16Case {
  std::string name;
  std::function<void(AttentionCase &)> configure;
};

std::vector<Bf16Case> Cases() {
  std::vector<Bf16Case> cases = {
      // Decode: 777 keys are three splits of 256 and a 9-key tail block.
      {"decode_llama3_partial_blocks_and_splits",
       [](AttentionCase &c) {
         c.q_len(1)
             .kv_len(777)
             .heads(32, 8)
             .head_dim(128)
             .dtypes(BF16, BF16, BF16)
             .seed(21);
       }},
      {"decode_batch_mixed_lengths_and_empty",
       [](AttentionCase &c) {
         c.batch(3)
             .q_len(1)
             .kv_len(600)
             .heads(4, 4)
             .head_dim(128)
             .dtypes(BF16, BF16, F32)
             .kv_lengths({600, 1, 0})
             .seed(23);
       }},
      {"decode_rows7_causal",
       [](AttentionCase &c) {
         c.q_len(7)
             .kv_len(520)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, F32)
             .causal()
             .seed(24);
       }},
      {"decode_rows8_causal_tree",
       [](AttentionCase &c) {
         c.q_len(8)
             .kv_len(400)
             .heads(4, 1)
             .head_dim(64)
             .dtypes(BF16, BF16, F32)
             .causal()
             .tree(8)
             .seed(25);
       }},
      {"decode_softcap",
       [](AttentionCase &c) {
         c.q_len(1)
             .kv_len(333)
             .heads(4, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, F32)
             .softcap(30.0f)
             .seed(26);
       }},
      {"decode_rows2_additive",
       [](AttentionCase &c) {
         c.q_len(2)
             .kv_len(290)
             .heads(2, 2)
             .head_dim(64)
             .dtypes(BF16, BF16, F32)
             .additive()
             .seed(27);
       }},
      {"decode_f32_query_widens",
       [](AttentionCase &c) {
         c.q_len(1)
             .kv_len(500)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(F32, BF16, F32)
             .seed(28);
       }},
      // Prefill shapes.
      {"prefill_rows40_gqa2_d16",
       [](AttentionCase &c) {
         c.q_len(40)
             .kv_len(60)
             .heads(2, 1)
             .head_dim(16)
             .dtypes(BF16, BF16, F32)
             .seed(2);
       }},
      {"prefill_causal_gqa_remainders",
       [](AttentionCase &c) {
         c.batch(2)
             .q_len(77)
             .kv_len(131)
             .heads(8, 2)
             .head_dim(128)
             .dtypes(BF16, BF16, F32)
             .causal()
             .kv_lengths({131, 50})
             .seed(3);
       }},
      {"prefill_causal_window",
       [](AttentionCase &c) {
         c.q_len(60)
             .kv_len(200)
             .heads(4, 1)
             .head_dim(64)
             .dtypes(BF16, BF16, F32)
             .causal()
             .window(37, 0)
             .seed(7);
       }},
      {"prefill_causal_tree",
       [](AttentionCase &c) {
         c.q_len(12)
             .kv_len(90)
             .heads(4, 2)
             .head_dim(64)
             .dtypes(BF16, BF16, F32)
             .causal()
             .tree(12)
             .seed(8);
       }},
      {"prefill_additive_softcap",
       [](AttentionCase &c) {
         c.q_len(33)
             .kv_len(70)
             .heads(2, 2)
             .head_dim(64)
             .dtypes(BF16, BF16, F32)
             .additive()
             .softcap(30.0f)
             .seed(9);
       }},
  };
  // Every specialised head_dim and generic ones (34; 16 is below the
  // vector width), for one decode row and a prefill tile.
  for (int64_t d : {64, 80, 96, 256, 34, 16}) {
    cases.push_back({"decode_d" + std::to_string(d), [d](AttentionCase &c) {
                       c.q_len(1)
                           .kv_len(300)
                           .heads(8, 2)
                           .head_dim(d)
                           .dtypes(BF16, BF16, F32)
                           .seed(22 + static_cast<uint64_t>(d));
                     }});
    cases.push_back({"prefill_d" + std::to_string(d), [d](AttentionCase &c) {
                       c.q_len(40)
                           .kv_len(100)
                           .heads(4, 4)
                           .head_dim(d)
                           .dtypes(BF16, BF16, BF16)
                           .seed(5);
                     }});
  }
  return cases;
}

using Bf16Cases = KernelSuite<Bf16Case>;

TEST_P(Bf16Cases, MatchesOracle) {
  AttentionCase c;
  test_case().configure(c);
  Check(c);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Bf16Cases,
    testing::ValuesIn(ForEveryKernel<Bf16Case>(
        Cases(),
        TakesConfigured<Bf16Case>([](AttentionCase &c, const Bf16Case &b) {
          b.configure(c);
        }))),
    KernelParamName<Bf16Case>([](const Bf16Case &b) { return b.name; }));

} // namespace
} // namespace fctest
