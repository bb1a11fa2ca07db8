// ISA detection, capping (option and FLASHCPU_ISA) and the per-ISA row
// converters, which must give the scalar code's bits on every ISA.
#include <gtest/gtest.h>

#include "fixtures.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashcpu/flashcpu.h"
extern "C" {
#include "dispatch/isa.h"
#include "dispatch/kernel_table.h"
}

namespace {

TEST(IsaDispatch, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(fc_isa_parse(nullptr), FLASHCPU_ISA_AUTO);
  EXPECT_EQ(fc_isa_parse(""), FLASHCPU_ISA_AUTO);
  EXPECT_EQ(fc_isa_parse("scalar"), FLASHCPU_ISA_SCALAR);
  EXPECT_EQ(fc_isa_parse("avx2"), FLASHCPU_ISA_AVX2);
  EXPECT_EQ(fc_isa_parse("avx512"), FLASHCPU_ISA_AVX512);
  EXPECT_EQ(fc_isa_parse("neon"), FLASHCPU_ISA_NEON);
  EXPECT_EQ(fc_isa_parse("AVX2"), -1);
  EXPECT_EQ(fc_isa_parse("sse"), -1);
}

TEST(IsaDispatch, BestIsaFollowsFeaturesAndCap) {
  fc_cpu_features none{};
  EXPECT_EQ(fc_best_isa(&none, FLASHCPU_ISA_AUTO), FLASHCPU_ISA_SCALAR);
#if defined(__x86_64__)
  fc_cpu_features avx2{};
  avx2.avx2 = avx2.fma = avx2.f16c = true;
  EXPECT_EQ(fc_best_isa(&avx2, FLASHCPU_ISA_AUTO), FLASHCPU_ISA_AVX2);
  fc_cpu_features no_fma = avx2;
  no_fma.fma = false; // AVX2 without FMA is not enough
  EXPECT_EQ(fc_best_isa(&no_fma, FLASHCPU_ISA_AUTO), FLASHCPU_ISA_SCALAR);
  fc_cpu_features avx512 = avx2;
  avx512.avx512f = avx512.avx512bw = avx512.avx512vl = avx512.avx512dq = true;
  EXPECT_EQ(fc_best_isa(&avx512, FLASHCPU_ISA_AUTO), FLASHCPU_ISA_AVX512);
  EXPECT_EQ(fc_best_isa(&avx512, FLASHCPU_ISA_AVX2), FLASHCPU_ISA_AVX2);
  EXPECT_EQ(fc_best_isa(&avx512, FLASHCPU_ISA_SCALAR), FLASHCPU_ISA_SCALAR);
  fc_cpu_features partial = avx512;
  partial.avx512bw = false; // F without BW: only AVX2 qualifies
  EXPECT_EQ(fc_best_isa(&partial, FLASHCPU_ISA_AUTO), FLASHCPU_ISA_AVX2);
#endif
#if defined(__aarch64__)
  fc_cpu_features neon{};
  neon.neon = true;
  EXPECT_EQ(fc_best_isa(&neon, FLASHCPU_ISA_AUTO), FLASHCPU_ISA_NEON);
  EXPECT_EQ(fc_best_isa(&neon, FLASHCPU_ISA_SCALAR), FLASHCPU_ISA_SCALAR);
#endif
}

flashcpu_isa ContextIsa(flashcpu_isa cap, flashcpu_status *status) {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = 1;
  options.max_isa = cap;
  flashcpu_context *ctx = nullptr;
  *status = flashcpu_context_create(&options, &ctx);
  flashcpu_isa isa = flashcpu_context_isa(ctx);
  flashcpu_context_destroy(ctx);
  return isa;
}

TEST(IsaDispatch, OptionCapsTheContext) {
  flashcpu_status status;
  EXPECT_EQ(ContextIsa(FLASHCPU_ISA_SCALAR, &status), FLASHCPU_ISA_SCALAR);
  EXPECT_EQ(status, FLASHCPU_OK);
  flashcpu_isa best = fc_best_isa(fc_cpu_features_get(), FLASHCPU_ISA_AUTO);
  EXPECT_EQ(ContextIsa(FLASHCPU_ISA_AUTO, &status), best);
}

TEST(IsaDispatch, EnvironmentCapsTheContext) {
  flashcpu_status status;
  {
    fctest::ScopedEnv isa("FLASHCPU_ISA", "scalar");
    EXPECT_EQ(ContextIsa(FLASHCPU_ISA_AUTO, &status), FLASHCPU_ISA_SCALAR);
    EXPECT_EQ(status, FLASHCPU_OK);
  }
  fctest::ScopedEnv isa("FLASHCPU_ISA", "mmx");
  ContextIsa(FLASHCPU_ISA_AUTO, &status);
  EXPECT_EQ(status, FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("FLASHCPU_ISA=mmx"),
            std::string::npos);
}

TEST(IsaDispatch, UnsupportedIsaIsAnError) {
#if defined(__x86_64__)
  flashcpu_isa foreign = FLASHCPU_ISA_NEON;
#else
  flashcpu_isa foreign = FLASHCPU_ISA_AVX2;
#endif
  flashcpu_status status;
  ContextIsa(foreign, &status);
  EXPECT_EQ(status, FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("does not support"),
            std::string::npos);
  // 7 lies in the enum's value range (0..7), so the cast is defined in C++,
  // yet it names no ISA.
  ContextIsa(static_cast<flashcpu_isa>(7), &status);
  EXPECT_EQ(status, FLASHCPU_ERROR_INVALID_ARGUMENT);
}

class RowConverters : public ::testing::TestWithParam<flashcpu_isa> {};

// Random bit patterns (NaN, inf, subnormals included) of every length up to
// 67, converted by the ISA's code and by the scalar code: same bits.
TEST_P(RowConverters, MatchScalarBitForBit) {
  flashcpu_isa isa = GetParam();
  if (!fc_isa_supported(fc_cpu_features_get(), isa))
    GTEST_SKIP() << flashcpu_isa_name(isa) << " not supported on this CPU";
  fc_kernel_table table, scalar;
  fc_settings settings;
  fc_settings_default(&settings, fc_cpu_features_get());
  fc_kernel_table_fill(&table, isa, fc_cpu_features_get(), &settings);
  fc_kernel_table_fill(&scalar, FLASHCPU_ISA_SCALAR, fc_cpu_features_get(),
                       &settings);
  std::mt19937 random(7);
  for (int dtype = 0; dtype < 3; dtype++)
    for (int64_t count = 1; count <= 67; count++)
      for (float factor : {1.0f, 0.0883883f}) {
        std::vector<uint32_t> raw(count);
        for (auto &word : raw) word = random();
        std::vector<float> got(count + 1, -7.0f), want(count + 1, -7.0f);
        table.row_to_f32[dtype](raw.data(), count, factor, got.data());
        scalar.row_to_f32[dtype](raw.data(), count, factor, want.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), (count + 1) * 4), 0)
            << table.row_to_f32_names[dtype] << " count " << count;
      }
}

INSTANTIATE_TEST_SUITE_P(
    EveryIsa, RowConverters,
    ::testing::Values(FLASHCPU_ISA_SCALAR, FLASHCPU_ISA_AVX2,
                      FLASHCPU_ISA_AVX512, FLASHCPU_ISA_NEON),
    [](const auto &param_info) {
      return std::string(flashcpu_isa_name(param_info.param));
    });

TEST(IsaDispatch, DescribeNamesPlanAndKernels) {
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  size_t needed = flashcpu_context_describe(ctx, nullptr, 0);
  std::string text(needed + 1, '\0');
  EXPECT_EQ(flashcpu_context_describe(ctx, text.data(), text.size()), needed);
  for (const char *part :
       {"teams:", "team 0:", "isa chosen:",
        "kernels, in the order the choice tries them:", "  prefill: ",
        "  merge: ", "settings: splitkv_max_rows="})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  char small[8];
  EXPECT_EQ(flashcpu_context_describe(ctx, small, sizeof small), needed);
  EXPECT_EQ(std::strlen(small), sizeof small - 1); // truncated, terminated
  flashcpu_context_destroy(ctx);
}

} // namespace
