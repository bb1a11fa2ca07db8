// Ragged paged steps, on every kernel of the registry, against the float64
// oracle. A step mixes the requests an engine batches:
//  - decode (1 row against its cached prefix),
//  - speculative verify (2..16 rows, some under a per-request tree mask),
//  - chunked prefill (tens to a few hundred rows against a longer prefix),
//  - requests of no rows and requests of no keys,
// in random order, their K/V in pages of 1, 3, 16 or 128 tokens scattered
// over the pool in random order (NHD, HND, or K and V in one buffer), with
// causal masks, windows, softcap, GQA, sinks, ALiBi ([Hq] and [R, Hq]) and
// additive masks in the packed-row layout. Every output row and lse is
// compared, request by request, with the oracle on a contiguous copy of that
// request (tolerance.h's rule over the whole step). Pages past a request's
// keys, spare pages and mask entries no request may read hold NaN; out and
// lse are poisoned with NaN, so a row left unwritten shows.
//
// A forced kernel makes the plan put every request into its family; a
// forced split-KV kernel takes at most 64 rows a request, so steps with
// longer chunks are not instantiated for it. Steps also run on the default
// choice (both families in one plan), and with 1, 2 and 3 threads, which
// must give the same bytes.
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_tester.h"
#include "paged_step.h"

namespace fctest {
namespace {

// ---------------------------------------------------------------------------
// The steps.

StepSpec Spec(const std::string &name,
              const std::function<void(StepSpec &)> &configure) {
  StepSpec spec;
  spec.name = name;
  configure(spec);
  return spec;
}

std::vector<StepSpec> Steps() {
  return {
      Spec("f32_nhd_p16_gqa4_causal_long_chunk",
           [](StepSpec &s) {
             s.max_prefill_rows = 120;
             s.seed = 1;
           }),
      Spec("f16_hnd_p3_gqa7_d80_window_softcap",
           [](StepSpec &s) {
             s.q_heads = 7;
             s.kv_heads = 1;
             s.head_dim = s.v_head_dim = 80;
             s.q = s.kv = s.out = F16;
             s.page_size = 3;
             s.layout = PageLayout::kHnd;
             s.window_left = 24;
             s.window_right = 0;
             s.softcap = 30.0f;
             s.max_prefix = 100;
             s.seed = 2;
           }),
      Spec("bf16_nhd_p1_mha_d72_packed_mask",
           [](StepSpec &s) {
             s.q_heads = s.kv_heads = 4;
             s.head_dim = s.v_head_dim = 72;
             s.q = s.kv = BF16;
             s.out = F32;
             s.page_size = 1;
             s.mask = MaskLayout::kPackedRows;
             s.max_prefix = 60;
             s.max_prefill_rows = 48;
             s.seed = 3;
           }),
      Spec("f32_hnd_p128_trees_wide_tree_f16_sinks",
           [](StepSpec &s) {
             s.page_size = 128;
             s.layout = PageLayout::kHnd;
             s.verify = 5;
             s.trees = 3;
             s.wide_tree = true;
             s.sinks = true;
             s.sinks_dtype = F16;
             s.max_prefix = 300;
             s.seed = 4;
           }),
      Spec("f16_nhd_p16_alibi_per_head_two_long_chunks",
           [](StepSpec &s) {
             s.q_heads = 4;
             s.kv_heads = 1;
             s.q = s.kv = s.out = F16;
             s.alibi = Alibi::kPerHead;
             s.decode = 2;
             s.verify = 1;
             s.prefill = 2;
             s.max_prefill_rows = 200;
             s.max_prefix = 200;
             s.seed = 5;
           }),
      Spec("bf16_hnd_p3_alibi_per_request_window_not_causal",
           [](StepSpec &s) {
             s.q = F32;
             s.kv = BF16;
             s.out = BF16;
             s.page_size = 3;
             s.layout = PageLayout::kHnd;
             s.alibi = Alibi::kPerRequest;
             s.causal = false;
             s.window_left = 40;
             s.window_right = 5;
             s.seed = 6;
           }),
      Spec("one_buffer_offsets_strided_q_d100_key_padding_mask_softcap",
           [](StepSpec &s) {
             s.q_heads = 6;
             s.kv_heads = 3;
             s.head_dim = s.v_head_dim = 100;
             s.q = F32;
             s.kv = BF16;
             s.out = F16;
             s.layout = PageLayout::kOneBuffer;
             s.block_offsets = true;
             s.strided_q = true;
             s.mask = MaskLayout::kKeyPadding;
             s.softcap = 20.0f;
             s.seed = 7;
           }),
      Spec("f16_nhd_p16_large_scores",
           [](StepSpec &s) {
             s.q = s.kv = F16;
             s.out = F32;
             s.large = true;
             s.seed = 8;
           }),
      Spec("bf16_nhd_p16_decode_long_prefixes_d128_mqa",
           [](StepSpec &s) {
             s.q_heads = 4;
             s.kv_heads = 1;
             s.head_dim = s.v_head_dim = 128;
             s.q = s.kv = s.out = BF16;
             s.decode = 5;
             s.verify = 1;
             s.trees = 1;
             s.prefill = 0;
             s.max_prefix = 900;
             s.seed = 9;
           }),
      Spec("p3_empty_requests_rows_past_keys_bf16_sinks",
           [](StepSpec &s) {
             s.q_heads = 4;
             s.kv_heads = 2;
             s.head_dim = s.v_head_dim = 32;
             s.page_size = 3;
             s.decode = 2;
             s.verify = 2;
             s.trees = 2;
             s.prefill = 0;
             s.no_rows = 4;
             s.no_keys = 3;
             s.rows_past_keys = true;
             s.max_prefix = 20;
             s.sinks = true;
             s.sinks_dtype = BF16;
             s.seed = 10;
           }),
      Spec("f32_nhd_p16_gqa7_d40_dv24_not_causal_head_major_out",
           [](StepSpec &s) {
             s.q_heads = 14;
             s.kv_heads = 2;
             s.head_dim = 40;
             s.v_head_dim = 24;
             s.head_major_out = true;
             s.causal = false;
             s.max_prefix = 80;
             s.max_prefill_rows = 40;
             s.seed = 12;
           }),
  };
}

std::string StepName(const StepSpec &spec) { return spec.name; }

// Rows that take every request of the step: a forced split-KV kernel
// refuses requests of more than 64 rows (so do the rows' takes()).
bool Instantiable(Kernel kernel, const StepSpec &spec) {
  return RowTakesStep(kernel, spec, nullptr);
}

using PagedRagged = KernelSuite<StepSpec>;

TEST_P(PagedRagged, EveryRowMatchesTheOracle) {
  PagedStep step(test_case());
  flashcpu_context *context = ctx();
  ASSERT_NE(context, nullptr);
  std::string error;
  ASSERT_EQ(step.Run(context, &error), FLASHCPU_OK)
      << error << "; " << step.Describe();
  EXPECT_TRUE(step.CheckAgainstOracle());
}

INSTANTIATE_TEST_SUITE_P(
    Steps, PagedRagged,
    testing::ValuesIn(ForEveryKernel<StepSpec>(Steps(), Instantiable)),
    KernelParamName<StepSpec>(StepName));

// The plan refuses a step a forced split-KV kernel cannot take whole (a
// chunk of 65 rows), naming the kernel, rather than running part of it.
using PagedRaggedForcedSplitKv = KernelOnly;

TEST_P(PagedRaggedForcedSplitKv, RefusesAChunkOf65Rows) {
  StepSpec spec = Steps().front();
  spec.q = spec.kv = BF16; // what every row takes, the bf16-dot ones included
  spec.prefill = 1;
  spec.min_prefill_rows = spec.max_prefill_rows = 65;
  PagedStep step(spec);
  std::string error;
  EXPECT_EQ(step.Run(ctx(), &error), FLASHCPU_ERROR_INVALID_ARGUMENT)
      << step.Describe();
  EXPECT_NE(error.find(kernel()->name), std::string::npos) << error;
  spec.min_prefill_rows = spec.max_prefill_rows = 64;
  std::string why;
  if (!RowTakesStep(kernel(), spec,
                    &why)) // e.g. integer scores: K must be i8/u8
    GTEST_SKIP() << kernel()->name << " takes no bf16 step: " << why;
  PagedStep fits(spec);
  EXPECT_EQ(fits.Run(ctx(), &error), FLASHCPU_OK) << error;
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, PagedRaggedForcedSplitKv,
    testing::ValuesIn(ForEveryKernel<NoCase>(
        {NoCase{}},
        [](Kernel kernel, const NoCase &) {
          return kernel->family ==
                 FC_FAMILY_SPLITKV; // a prefill row takes any number of rows
        })),
    KernelOnlyName);

// ---------------------------------------------------------------------------
// Determinism: the same step gives the same bytes with 1, 2 and 3 threads.

std::vector<StepSpec> DeterminismSteps() {
  std::vector<StepSpec> steps;
  for (const StepSpec &spec : Steps())
    if (spec.name == "f32_hnd_p128_trees_wide_tree_f16_sinks" ||
        spec.name == "bf16_nhd_p16_decode_long_prefixes_d128_mqa")
      steps.push_back(spec);
  return steps;
}

using PagedRaggedDeterminism = KernelSuite<StepSpec>;

TEST_P(PagedRaggedDeterminism, SameBytesWithOneTwoAndThreeThreads) {
  PagedStep step(test_case());
  std::string error;
  ASSERT_EQ(step.Run(ctx(1), &error), FLASHCPU_OK) << error;
  ASSERT_TRUE(
      step.CheckAgainstOracle()); // the reference is right, not just stable
  const std::vector<unsigned char> reference = step.Written();
  for (int threads : {2, 3, 1}) {
    flashcpu_context *context = ctx(threads);
    ASSERT_NE(context, nullptr);
    ASSERT_EQ(step.Run(context, &error), FLASHCPU_OK) << error;
    EXPECT_TRUE(step.Written() == reference) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, PagedRaggedDeterminism,
                         testing::ValuesIn(ForEveryKernel<StepSpec>(
                             DeterminismSteps(), Instantiable)),
                         KernelParamName<StepSpec>(StepName));

// ---------------------------------------------------------------------------
// The default choice: decode and short verify requests go to split-KV, the
// rest to prefill, in one plan; on every ISA this CPU has (forced lower by
// the ISA cap).

struct ChoiceCase {
  flashcpu_isa isa;
  StepSpec step;
};

std::vector<ChoiceCase> ChoiceCases() {
  std::vector<ChoiceCase> cases;
  for (flashcpu_isa isa :
       {FLASHCPU_ISA_AUTO, FLASHCPU_ISA_AVX512, FLASHCPU_ISA_AVX2,
        FLASHCPU_ISA_NEON, FLASHCPU_ISA_SCALAR})
    for (const StepSpec &spec : Steps())
      if (spec.name == "f32_nhd_p16_gqa4_causal_long_chunk" ||
          spec.name == "bf16_hnd_p3_alibi_per_request_window_not_causal")
        cases.push_back({isa, spec});
  return cases;
}

void PrintTo(const ChoiceCase &c, std::ostream *os) {
  *os << flashcpu_isa_name(c.isa) << " " << c.step.name;
}

class PagedRaggedDefaultChoice : public testing::TestWithParam<ChoiceCase> {};

TEST_P(PagedRaggedDefaultChoice, BothFamiliesInOnePlanMatchTheOracle) {
  const ChoiceCase &c = GetParam();
  if (!flashcpu_isa_supported(c.isa))
    GTEST_SKIP() << "this CPU (or its OS) lacks " << flashcpu_isa_name(c.isa);
  ScopedEnv no_tune_file("FLASHCPU_TUNE_FILE", nullptr);
  flashcpu_context_options options = KernelOptions(c.isa, nullptr);
  options.settings = "splitkv_max_rows = 8";
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  PagedStep step(c.step);
  std::string error;
  ASSERT_EQ(step.Run(context, &error), FLASHCPU_OK) << error;
  const std::string &plan = step.plan_description();
  // A scalar context has no split-KV kernel: every request takes prefill.
  if (c.isa == FLASHCPU_ISA_SCALAR)
    EXPECT_EQ(plan.find("split-KV decode: "), std::string::npos) << plan;
  else
    EXPECT_NE(plan.find("split-KV decode: "), std::string::npos) << plan;
  EXPECT_NE(plan.find("prefill: "), std::string::npos) << plan;
  EXPECT_TRUE(step.CheckAgainstOracle());
}

INSTANTIATE_TEST_SUITE_P(
    Steps, PagedRaggedDefaultChoice, testing::ValuesIn(ChoiceCases()),
    [](const testing::TestParamInfo<ChoiceCase> &param_info) {
      return std::string(flashcpu_isa_name(param_info.param.isa)) + "__" +
             param_info.param.step.name;
    });

} // namespace
} // namespace fctest
