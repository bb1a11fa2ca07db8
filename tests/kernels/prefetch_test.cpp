// Where split-KV decode prefetches the next key block (the setting
// decode_prefetch: l1 or l2) is a hint: on every split-KV row of the
// registry it must show in the context's settings and must not change a
// single output byte.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16, F32 = FLASHCPU_DTYPE_F32;

// Every output element and lse of c, as stored (out_at widens exactly).
void Append(const AttentionCase &c, std::vector<double> *values) {
  const AttentionCase::Shape s = c.shape();
  for (int64_t i = 0; i < s.q_len; i++)
    for (int64_t h = 0; h < s.q_heads; h++) {
      for (int64_t d = 0; d < s.v_head_dim; d++)
        values->push_back(c.out_at(0, i, h, d));
      values->push_back(c.lse_at(0, h, i));
    }
}

using DecodePrefetch = KernelSuite<NoCase>;

// Llama3-shaped decode (777 keys: three splits and a tail block) and a
// 3-row causal verify step, with each prefetch level, on two threads.
TEST_P(DecodePrefetch, EitherLevelIsNamedAndGivesTheSameBytes) {
  std::vector<double> values[2];
  const char *const levels[2] = {"l1", "l2"};
  for (int n = 0; n < 2; n++) {
    flashcpu_context_options options = KernelContextOptions(kernel(), 2);
    AddSetting(options, std::string("decode_prefetch = ") + levels[n]);
    Context context(options);
    ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(DescribedSetting(context, "decode_prefetch"),
              n == 0 ? "l1" : "l2");
    AttentionCase one;
    one.q_len(1)
        .kv_len(777)
        .heads(32, 8)
        .head_dim(128)
        .dtypes(BF16, BF16, BF16)
        .seed(61);
    if (!Check(one, context)) return;
    Append(one, &values[n]);
    AttentionCase rows;
    rows.q_len(3)
        .kv_len(530)
        .heads(8, 2)
        .head_dim(64)
        .dtypes(BF16, BF16, F32)
        .causal()
        .seed(62);
    if (!Check(rows, context)) return;
    Append(rows, &values[n]);
  }
  ASSERT_EQ(values[0].size(), values[1].size());
  EXPECT_EQ(std::memcmp(values[0].data(), values[1].data(),
                        values[0].size() * sizeof(double)),
            0);
}

std::vector<KernelParam<NoCase>> SplitKvRows() {
  std::vector<KernelParam<NoCase>> params;
  for (Kernel kernel : KernelsOfFamily(FC_FAMILY_SPLITKV))
    params.push_back({kernel, NoCase{}});
  return params;
}

INSTANTIATE_TEST_SUITE_P(SplitKv, DecodePrefetch,
                         testing::ValuesIn(SplitKvRows()), KernelOnlyName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(
    DecodePrefetch); // a build without split-KV rows

} // namespace
} // namespace fctest
