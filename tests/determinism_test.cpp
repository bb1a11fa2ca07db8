// For the same inputs the output bytes (out and lse) must not depend on
// the thread count or the schedule: compared with memcmp across contexts
// of 1, 2, 3 and 7 threads and the default, and across repeated runs.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

struct Result {
  std::vector<unsigned char> out;
  std::vector<float> lse;
};

Result Capture(const AttentionCase &c, int64_t batch, int64_t q_heads, int64_t q_len) {
  Result r;
  r.out = c.out().bytes();
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < q_heads; h++)
      for (int64_t i = 0; i < q_len; i++) r.lse.push_back(c.lse_at(b, h, i));
  return r;
}

bool SameBytes(const Result &a, const Result &b) {
  return a.out == b.out && a.lse.size() == b.lse.size() &&
         std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
}

struct DeterminismCase {
  const char *name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim;
  std::function<void(AttentionCase &)> options;
};

const DeterminismCase kCases[] = {
    {"causal_prefill_gqa", 2, 300, 300, 8, 2, 64,
     [](AttentionCase &c) { c.causal().dtypes(FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_F16); }},
    {"decode_long_kv", 3, 1, 2000, 8, 1, 128,
     [](AttentionCase &c) { c.dtypes(FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F32); }},
    {"every_option", 2, 97, 250, 6, 3, 72,
     [](AttentionCase &c) {
       c.causal().window(90, 3).softcap(20.0f).tree(80).additive(AdditivePattern::kBroadcastHeads)
           .kv_lengths({250, 131}).magnitude(Magnitude::kLarge).layout(Layout::kCache);
     }},
};

class Determinism : public testing::TestWithParam<DeterminismCase> {};

TEST_P(Determinism, SameBytesForAnyThreadCountAndRun) {
  const DeterminismCase &d = GetParam();
  AttentionCase c;
  c.batch(d.batch).q_len(d.q_len).kv_len(d.kv_len).heads(d.q_heads, d.kv_heads)
      .head_dim(d.head_dim).seed(97);
  d.options(c);
  c.Build();

  // Reference: one thread; checked against the oracle once.
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = 1;
  flashcpu_context *single = nullptr;
  ASSERT_EQ(flashcpu_context_create(&options, &single), FLASHCPU_OK);
  c.Test(single);
  const Result reference = Capture(c, d.batch, d.q_heads, d.q_len);
  flashcpu_context_destroy(single);

  for (int threads : {0, 2, 3, 7, 1}) {
    options.num_threads = threads;
    flashcpu_context *ctx = nullptr;
    ASSERT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK);
    for (int run = 0; run < 2; run++) {
      ASSERT_EQ(c.Run(ctx), FLASHCPU_OK) << flashcpu_last_error(ctx);
      EXPECT_TRUE(SameBytes(reference, Capture(c, d.batch, d.q_heads, d.q_len)))
          << threads << " threads (0: default, " << flashcpu_context_num_threads(ctx) << "), run "
          << run;
    }
    flashcpu_context_destroy(ctx);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Determinism, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<DeterminismCase> &param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace fctest
