// Decode shapes (1 to 64 query rows) against the oracle, on contexts whose
// decode thresholds (FLASHCPU_DECODE_THRESHOLDS) send them to split-KV
// decode (keys cut into splits of >= 256 keys whose partial states merge in
// a tree), and single rows also to one-pass decode; FLASHCPU_VERBOSE's line
// shows which kernel ran. Each case runs on every split-KV kernel this CPU
// can run (AVX-512's own; the fcv_* template on AVX2 and NEON), capping the
// context's ISA. They cover split-KV's remainders (kv lengths not a
// multiple of the split or of the 16-key block, per-batch lengths 0 and
// 1), every mask, GQA shapes that leave padding slots, head_dims with and
// without a specialised copy and ones the template copies to f32 first,
// strides; and the bytes must not depend on the thread count.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

struct DecodeCase {
  const char *name;
  std::function<void(AttentionCase &)> configure;
};

const DecodeCase kDecodeCases[] = {
    {"bf16_d128_gqa4_kv1000", [](AttentionCase &c) {
       c.kv_len(1000).heads(8, 2).head_dim(128).dtypes(BF16, BF16, BF16);
     }},
    {"f16_d64_gqa2_kv_lengths_0_1_17_700", [](AttentionCase &c) {
       c.batch(4).kv_len(700).heads(4, 2).head_dim(64).dtypes(F16, F16, F32)
           .kv_lengths({0, 1, 17, 700});
     }},
    {"f32_d80_gqa7_padding_slots_cache_layout", [](AttentionCase &c) {
       c.batch(2).kv_len(531).heads(7, 1).head_dim(80).layout(Layout::kCache)
           .kv_lengths({531, 300});
     }},
    {"bf16_d256_mqa_large_scores", [](AttentionCase &c) {
       c.kv_len(600).heads(4, 1).head_dim(256).dtypes(BF16, BF16, F32)
           .magnitude(Magnitude::kLarge);
     }},
    {"f32_d1_mha", [](AttentionCase &c) { c.kv_len(300).heads(3, 3).head_dim(1); }},
    {"f16_d96_v40_window_mid_split", [](AttentionCase &c) {
       c.kv_len(2000).heads(8, 2).head_dim(96).v_head_dim(40).dtypes(F16, F16, F16)
           .window(300, -1).layout(Layout::kBHSD);
     }},
    {"bf16_d128_tree_softcap_unaligned", [](AttentionCase &c) {
       c.batch(2).kv_len(513).heads(8, 2).head_dim(128).dtypes(BF16, BF16, BF16)
           .tree(40).softcap(30.0f).layout(Layout::kUnaligned).kv_lengths({513, 257});
     }},
    {"f32_d72_additive_key_padding", [](AttentionCase &c) {
       c.batch(2).kv_len(777).heads(6, 3).head_dim(72)
           .additive(AdditivePattern::kKeyPadding, 0.3).kv_lengths({777, 16});
     }},
    {"f32_d128_additive_hides_a_whole_split", [](AttentionCase &c) {
       c.kv_len(800).heads(4, 1).head_dim(128).additive(AdditivePattern::kFull, 0.97);
     }},
    {"bf16_d64_causal_window_zero", [](AttentionCase &c) {
       c.kv_len(400).heads(4, 4).head_dim(64).dtypes(BF16, BF16, BF16).causal().window(0, 0);
     }},
    // Several rows (speculative verification).
    {"rows2_causal_f16_d128", [](AttentionCase &c) {
       c.q_len(2).kv_len(650).heads(8, 2).head_dim(128).dtypes(F16, F16, F16).causal();
     }},
    {"rows5_tree_bf16_kv_lengths", [](AttentionCase &c) {
       c.batch(3).q_len(5).kv_len(300).heads(8, 2).head_dim(128).dtypes(BF16, BF16, F32)
           .tree(5).causal().kv_lengths({300, 5, 129});
     }},
    {"rows8_tree_broadcast_gqa7_d64", [](AttentionCase &c) {
       c.q_len(8).kv_len(1030).heads(7, 1).head_dim(64).tree(8, 0.5, true);
     }},
    {"rows16_causal_rows_past_kv_length", [](AttentionCase &c) {
       c.batch(2).q_len(16).kv_len(520).heads(4, 2).head_dim(80).causal()
           .kv_lengths({520, 7});
     }},
    {"rows33_window_additive_softcap", [](AttentionCase &c) {
       c.q_len(33).kv_len(600).heads(2, 1).head_dim(128).window(100, 3)
           .additive(AdditivePattern::kBroadcastHeads).softcap(20.0f);
     }},
    {"rows64_tree_large_bf16", [](AttentionCase &c) {
       c.q_len(64).kv_len(700).heads(4, 2).head_dim(128).dtypes(BF16, BF16, BF16)
           .tree(64).magnitude(Magnitude::kLarge);
     }},
    {"rows4_not_causal_mha", [](AttentionCase &c) {
       c.q_len(4).kv_len(270).heads(5, 5).head_dim(32);
     }},
    // Ten splits of 256 keys: more than the split launch merges itself, so
    // a merge launch follows (the cases above merge in the split launch).
    {"bf16_kv2500_ten_splits_merge_launch", [](AttentionCase &c) {
       c.batch(2).kv_len(2500).heads(8, 2).head_dim(128).dtypes(BF16, BF16, F32)
           .kv_lengths({2500, 2049});
     }},
};

// A context created with these environment settings (restored after), its
// ISA capped at isa.
flashcpu_context *ContextWith(const char *thresholds, int threads, bool verbose,
                              flashcpu_isa isa) {
  setenv("FLASHCPU_DECODE_THRESHOLDS", thresholds, 1);
  if (verbose) setenv("FLASHCPU_VERBOSE", "1", 1);
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = threads;
  options.max_isa = isa;
  flashcpu_context *ctx = nullptr;
  testing::internal::CaptureStderr();  // the plan FLASHCPU_VERBOSE prints
  EXPECT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  testing::internal::GetCapturedStderr();
  unsetenv("FLASHCPU_DECODE_THRESHOLDS");
  unsetenv("FLASHCPU_VERBOSE");
  return ctx;
}

struct Route {
  flashcpu_isa isa;
  const char *thresholds, *kernel;
  bool single_row_only;
};
std::vector<Route> Routes() {
  std::vector<Route> routes;
  for (flashcpu_isa isa : SplitKvIsas()) {
    if (isa == FLASHCPU_ISA_AVX512) {
      routes.push_back({isa, "splitkv_max_rows=64", "fc_attention_decode_splitkv__avx512", false});
      routes.push_back({isa, "onepass_min_tiles=1", "fc_attention_decode_onepass__avx512", true});
    } else if (isa == FLASHCPU_ISA_AVX2) {
      routes.push_back({isa, "splitkv_max_rows=64", "fc_attention_decode_splitkv__avx2", false});
    } else {
      routes.push_back({isa, "splitkv_max_rows=64", "fc_attention_decode_splitkv__neon", false});
    }
  }
  return routes;
}

class DecodeMatchesOracle : public testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeMatchesOracle, EveryRowOnEachDecodeKernel) {
  const std::vector<Route> routes = Routes();
  if (routes.empty()) GTEST_SKIP() << "no split-KV kernel on this CPU";
  for (const Route &route : routes) {
    AttentionCase c;
    c.seed(23);
    GetParam().configure(c);
    c.Build();
    if (route.single_row_only && c.q().dims()[1] != 1) continue;
    SCOPED_TRACE(route.kernel);
    flashcpu_context *ctx = ContextWith(route.thresholds, 0, true, route.isa);
    ASSERT_NE(ctx, nullptr);
    ASSERT_EQ(flashcpu_context_isa(ctx), route.isa);
    testing::internal::CaptureStderr();
    c.Test(ctx);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find(route.kernel), std::string::npos) << log;
    flashcpu_context_destroy(ctx);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeMatchesOracle, testing::ValuesIn(kDecodeCases),
                         [](const testing::TestParamInfo<DecodeCase> &param_info) {
                           return std::string(param_info.param.name);
                         });

// Bytes of out and lse for 1, 2, 3 and 7 threads must be identical, on
// each split-KV kernel.
class DecodeDeterminism : public testing::TestWithParam<DecodeCase> {};

// The bytes for 1, 2, 3 and 7 threads on one ISA's split-KV kernel.
void ExpectSameBytesForAnyThreadCount(const DecodeCase &decode_case, flashcpu_isa isa) {
  AttentionCase c;
  c.seed(29);
  decode_case.configure(c);
  c.Build();
  std::vector<unsigned char> reference_out;
  std::vector<float> reference_lse;
  const int64_t lse_count = c.q().dims()[0] * c.q().dims()[2] * c.q().dims()[1];
  for (int threads : {1, 2, 3, 7}) {
    flashcpu_context *ctx = ContextWith("splitkv_max_rows=64", threads, false, isa);
    ASSERT_NE(ctx, nullptr);
    ASSERT_EQ(c.Run(ctx), FLASHCPU_OK) << flashcpu_last_error(ctx);
    std::vector<float> lse(static_cast<size_t>(lse_count));
    std::memcpy(lse.data(), &c.lse_storage_for_checker_tests(16), lse.size() * sizeof(float));
    if (threads == 1) {
      EXPECT_TRUE(c.CheckAgainstOracle());
      reference_out = c.out().bytes();
      reference_lse = lse;
    } else {
      EXPECT_EQ(c.out().bytes(), reference_out) << threads << " threads";
      EXPECT_EQ(std::memcmp(lse.data(), reference_lse.data(), lse.size() * sizeof(float)), 0)
          << threads << " threads";
    }
    flashcpu_context_destroy(ctx);
  }
}

TEST_P(DecodeDeterminism, SameBytesForAnyThreadCount) {
  if (SplitKvIsas().empty()) GTEST_SKIP() << "no split-KV kernel on this CPU";
  for (flashcpu_isa isa : SplitKvIsas()) {
    SCOPED_TRACE(flashcpu_isa_name(isa));
    ExpectSameBytesForAnyThreadCount(GetParam(), isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeDeterminism,
                         testing::Values(kDecodeCases[0], kDecodeCases[1], kDecodeCases[6],
                                         kDecodeCases[11], kDecodeCases[13],
                                         kDecodeCases[15], kDecodeCases[16],
                                         kDecodeCases[17]),
                         [](const testing::TestParamInfo<DecodeCase> &param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace fctest

namespace fctest {
namespace {

TEST(DecodeThresholds, BadEnvironmentTextFailsContextCreation) {
  for (const char *text : {"splitkv_max_rows=65", "nonsense=1", "onepass_max_kv=-1",
                           "splitkv_max_rows=8,", "splitkv_max_rows"}) {
    setenv("FLASHCPU_DECODE_THRESHOLDS", text, 1);
    flashcpu_context *ctx = nullptr;
    EXPECT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_ERROR_INVALID_ARGUMENT) << text;
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("FLASHCPU_DECODE_THRESHOLDS"),
              std::string::npos);
    unsetenv("FLASHCPU_DECODE_THRESHOLDS");
  }
}

}  // namespace
}  // namespace fctest
