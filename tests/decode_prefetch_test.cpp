// Where split-KV decode prefetches the next key block:
// FLASHCPU_DECODE_PREFETCH=l1 or =l2 (either case); unset or any other
// value: L1 on AMD CPUs, L2 elsewhere.
// The hint is read when a context fills its kernel table; it must show in
// the context's description and must not change a single output byte, on
// every split-KV kernel the CPU has.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16, F32 = FLASHCPU_DTYPE_F32;

// A 2-thread context capped at isa, created with FLASHCPU_DECODE_PREFETCH
// set to hint (nullptr: unset); the variable is unset again after.
flashcpu_context *ContextWithHint(const char *hint, flashcpu_isa isa) {
  if (hint)
    setenv("FLASHCPU_DECODE_PREFETCH", hint, 1);
  else
    unsetenv("FLASHCPU_DECODE_PREFETCH");
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = 2;
  options.max_isa = isa;
  flashcpu_context *ctx = nullptr;
  EXPECT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  unsetenv("FLASHCPU_DECODE_PREFETCH");
  return ctx;
}

bool PrefetchesIntoL1(const std::string &text) {
  return text.find("split KV prefetch: next key block into L1") != std::string::npos;
}
bool PrefetchesIntoL2(const std::string &text) {
  return text.find("split KV prefetch: next key block into L2") != std::string::npos;
}

// Every output element and lse of c, as stored (out_at widens exactly).
void Append(const AttentionCase &c, int64_t q_len, int64_t q_heads, int64_t dim,
            std::vector<double> *values) {
  for (int64_t i = 0; i < q_len; i++)
    for (int64_t h = 0; h < q_heads; h++) {
      for (int64_t d = 0; d < dim; d++) values->push_back(c.out_at(0, i, h, d));
      values->push_back(c.lse_at(0, h, i));
    }
}

// Llama3-shaped decode (777 keys: three splits and a tail block) and a
// 3-row causal verify step.
std::vector<double> DecodeValues(flashcpu_context *ctx) {
  std::vector<double> values;
  AttentionCase one;
  one.q_len(1).kv_len(777).heads(32, 8).head_dim(128).dtypes(BF16, BF16, BF16).seed(61);
  one.Test(ctx);
  Append(one, 1, 32, 128, &values);
  AttentionCase rows;
  rows.q_len(3).kv_len(530).heads(8, 2).head_dim(64).dtypes(F32, BF16, F32).causal().seed(62);
  rows.Test(ctx);
  Append(rows, 3, 8, 64, &values);
  return values;
}

TEST(DecodePrefetch, EitherHintIsNamedAndGivesTheSameBytesOnEverySplitKvKernel) {
  const std::vector<flashcpu_isa> isas = SplitKvIsas();
  if (isas.empty()) GTEST_SKIP() << "no split-KV kernel on this CPU";
  for (flashcpu_isa isa : isas) {
    SCOPED_TRACE(flashcpu_isa_name(isa));
    flashcpu_context *near = ContextWithHint("l1", isa);
    flashcpu_context *far = ContextWithHint("L2", isa);
    ASSERT_NE(near, nullptr);
    ASSERT_NE(far, nullptr);
    EXPECT_TRUE(PrefetchesIntoL1(ContextDescription(near))) << ContextDescription(near);
    EXPECT_TRUE(PrefetchesIntoL2(ContextDescription(far))) << ContextDescription(far);
    const std::vector<double> a = DecodeValues(near), b = DecodeValues(far);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0);
    flashcpu_context_destroy(near);
    flashcpu_context_destroy(far);
  }
}

TEST(DecodePrefetch, DefaultIsL1ExactlyOnAmdAndOtherValuesKeepIt) {
  const std::vector<flashcpu_isa> isas = SplitKvIsas();
  if (isas.empty()) GTEST_SKIP() << "no split-KV kernel on this CPU";
  for (const char *hint : {static_cast<const char *>(nullptr), "l3", "3", ""}) {
    SCOPED_TRACE(hint ? hint : "(unset)");
    flashcpu_context *ctx = ContextWithHint(hint, isas.front());
    ASSERT_NE(ctx, nullptr);
    const std::string text = ContextDescription(ctx);
    EXPECT_EQ(PrefetchesIntoL1(text), VendorIsAmd()) << text;
    EXPECT_EQ(PrefetchesIntoL2(text), !VendorIsAmd()) << text;
    flashcpu_context_destroy(ctx);
  }
}

}  // namespace
}  // namespace fctest
