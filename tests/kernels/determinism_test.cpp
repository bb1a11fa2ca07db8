// For the same inputs the output bytes (out and lse) of each kernel of the
// registry must not depend on the thread count or the schedule: compared
// with memcmp across contexts forcing the kernel with 1, 2, 3 and 7
// threads and the default (every allowed core), and across repeated runs.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "decode_cases.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

struct Result {
  std::vector<unsigned char> out;
  std::vector<float> lse;
};

Result Capture(const AttentionCase &c) {
  const AttentionCase::Shape s = c.shape();
  Result r;
  r.out = c.out().bytes();
  for (int64_t b = 0; b < s.batch; b++)
    for (int64_t h = 0; h < s.q_heads; h++)
      for (int64_t i = 0; i < s.q_len; i++) r.lse.push_back(c.lse_at(b, h, i));
  return r;
}

bool SameBytes(const Result &a, const Result &b) {
  return a.out == b.out && a.lse.size() == b.lse.size() &&
         std::memcmp(a.lse.data(), b.lse.data(),
                     a.lse.size() * sizeof(float)) == 0;
}

struct DeterminismCase {
  std::string name;
  std::function<void(AttentionCase &)> configure;
};

std::vector<DeterminismCase> Cases() {
  std::vector<DeterminismCase> cases = {
      {"causal_prefill_gqa",
       [](AttentionCase &c) {
         c.batch(2)
             .q_len(300)
             .kv_len(300)
             .heads(8, 2)
             .head_dim(64)
             .causal()
             .dtypes(FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_F16,
                     FLASHCPU_DTYPE_F16);
       }},
      {"decode_long_kv",
       [](AttentionCase &c) {
         c.batch(3).q_len(1).kv_len(2000).heads(8, 1).head_dim(128).dtypes(
             FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F32);
       }},
      {"every_option",
       [](AttentionCase &c) {
         c.batch(2)
             .q_len(97)
             .kv_len(250)
             .heads(6, 3)
             .head_dim(72)
             .causal()
             .window(90, 3)
             .softcap(20.0f)
             .tree(80)
             .additive(AdditivePattern::kBroadcastHeads)
             .kv_lengths({250, 131})
             .magnitude(Magnitude::kLarge)
             .layout(Layout::kCache);
       }},
  };
  // Decode shapes: splits, merges, several rows, tails.
  for (const char *name :
       {"bf16_d128_gqa4_kv1000", "f16_d64_gqa2_kv_lengths_0_1_17_700",
        "bf16_d128_tree_softcap_unaligned", "rows5_tree_bf16_kv_lengths",
        "rows16_causal_rows_past_kv_length", "rows64_tree_large_bf16",
        "rows4_not_causal_mha", "bf16_kv2500_ten_splits_merge_launch"})
    for (const DecodeCase &d : DecodeCases())
      if (std::string(d.name) == name)
        cases.push_back({std::string("decode_") + name, d.configure});
  return cases;
}

using Determinism = KernelSuite<DeterminismCase>;

TEST_P(Determinism, SameBytesForAnyThreadCountAndRun) {
  AttentionCase c;
  test_case().configure(c);
  c.seed(97).Build();

  // Reference: one thread; checked against the oracle once.
  if (!Check(c, ctx(1))) return;
  const Result reference = Capture(c);

  for (int threads : {0, 2, 3, 7, 1}) {
    flashcpu_context *context = ctx(threads);
    ASSERT_NE(context, nullptr);
    for (int run = 0; run < 2; run++) {
      ASSERT_EQ(c.Run(context), FLASHCPU_OK) << flashcpu_last_error(context);
      EXPECT_TRUE(SameBytes(reference, Capture(c)))
          << threads << " threads (0: default, "
          << flashcpu_context_num_threads(context) << "), run " << run;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Determinism,
    testing::ValuesIn(ForEveryKernel<DeterminismCase>(
        Cases(), TakesConfigured<DeterminismCase>([](AttentionCase &c,
                                                     const DeterminismCase &d) {
          d.configure(c);
        }))),
    KernelParamName<DeterminismCase>([](const DeterminismCase &d) {
      return d.name;
    }));

} // namespace
} // namespace fctest
