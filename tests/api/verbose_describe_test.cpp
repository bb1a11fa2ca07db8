// What flashcpu_context_describe and FLASHCPU_VERBOSE=1 say: the kernels in
// the order the choice tries them ("  <family>: <name>"), the merge and the
// row loads, one "settings: key=value ..." line; at context creation the
// verbose log adds where the settings came from, and each call logs its
// kernel, the reason and the row converter.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "fixtures.h"

namespace fctest {
namespace {

TEST(Describe, ListsKernelsInChoiceOrderThenSettings) {
  ScopedEnv no_file("FLASHCPU_TUNE_FILE", nullptr);
  Context context(DefaultOptions());
  ASSERT_TRUE(context.ok());
  const std::string text = ContextDescription(context);
  const size_t list =
      text.find("\nkernels, in the order the choice tries them:\n");
  ASSERT_NE(list, std::string::npos) << text;
  const std::vector<DescribedKernel> kernels = DescribedKernels(context);
  ASSERT_FALSE(kernels.empty()) << text;
  for (const DescribedKernel &k : kernels) {
    EXPECT_TRUE(k.family == "split-KV decode" || k.family == "prefill")
        << k.family;
    EXPECT_EQ(k.name.rfind("fc_", 0), 0u) << k.name;
    EXPECT_NE(k.name.find("__"), std::string::npos)
        << k.name << ": what, then __ and the ISA";
  }
  // The choice ends in a prefill kernel, which takes every problem.
  EXPECT_EQ(kernels.back().family, "prefill");
  EXPECT_NE(text.find("\n  merge: "), std::string::npos) << text;
  for (const char *dtype : {"f32", "f16", "bf16"})
    EXPECT_NE(text.find(std::string("\n  ") + dtype + " row load: "),
              std::string::npos)
        << text;
  const size_t settings = text.find("\nsettings: splitkv_max_rows=");
  ASSERT_NE(settings, std::string::npos) << text;
  EXPECT_GT(settings, list);
  for (const char *key : {"launch", "prefill_bf16_dot", "decode_bf16_dot",
                          "decode_prefetch", "kernel"})
    EXPECT_NE(DescribedSetting(context, key), "") << key;
  EXPECT_EQ(text.find("(forced)"), std::string::npos) << text;
}

TEST(Describe, NamesAForcedKernel) {
  Context plain(DefaultOptions());
  ASSERT_TRUE(plain.ok());
  const std::string kernel = DescribedKernels(plain).back().name;
  flashcpu_context_options options = DefaultOptions();
  AddSetting(options, "kernel = " + kernel);
  Context forced(options);
  ASSERT_TRUE(forced.ok()) << flashcpu_last_error(nullptr);
  const std::string text = ContextDescription(forced);
  EXPECT_NE(text.find("  every call: " + kernel + " (forced)"),
            std::string::npos)
      << text;
  EXPECT_EQ(DescribedSetting(forced, "kernel"), kernel);
}

TEST(Verbose, CreationLogsPlanAndWhereSettingsCameFrom) {
  ScopedEnv verbose("FLASHCPU_VERBOSE", "1");
  ScopedEnv no_file("FLASHCPU_TUNE_FILE", nullptr);
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  options.settings = "splitkv_max_rows = 4";
  StderrCapture capture;
  Context context(options);
  const std::string log = capture.Take();
  ASSERT_TRUE(context.ok());
  EXPECT_NE(log.find("kernels, in the order the choice tries them:"),
            std::string::npos)
      << log;
  EXPECT_NE(
      log.find("[flashcpu] settings from built-in defaults and the options: "
               "splitkv_max_rows=4 "),
      std::string::npos)
      << log;
}

TEST(Verbose, EachCallLogsItsKernelReasonAndRowLoads) {
  ScopedEnv verbose("FLASHCPU_VERBOSE", "1");
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  Context context;
  {
    StderrCapture creation;
    ASSERT_EQ(context.Create(options), FLASHCPU_OK);
  }
  AttentionCase c;
  c.q_len(40).kv_len(60).heads(2, 1).head_dim(16).seed(2);
  StderrCapture capture;
  c.Test(context);
  const std::string log = capture.Take();
  const std::string prefix =
      "[flashcpu] attention B=1 L=40 S=60 Hq=2 Hkv=1 D=16: ";
  const size_t at = log.find(prefix);
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line =
      log.substr(at + prefix.size(), log.find('\n', at) - at - prefix.size());
  bool named = false;
  for (const DescribedKernel &k : DescribedKernels(context))
    named = named || line.rfind(k.name + " (", 0) == 0;
  EXPECT_TRUE(named) << line;
  EXPECT_NE(line.find("40 rows, prefill"), std::string::npos) << line;
  EXPECT_NE(line.find("), row loads fc_f32_row_to_f32__"), std::string::npos)
      << line;
}

TEST(Verbose, OffByDefaultAndForZero) {
  for (const char *value : {static_cast<const char *>(nullptr), "0", ""}) {
    ScopedEnv verbose("FLASHCPU_VERBOSE", value);
    StderrCapture capture;
    flashcpu_context_options options = DefaultOptions();
    options.num_threads = 1;
    Context context(options);
    ASSERT_TRUE(context.ok());
    AttentionCase c;
    c.q_len(3).kv_len(20).heads(2, 1).head_dim(8).seed(4);
    c.Test(context);
    EXPECT_EQ(capture.Take(), "") << (value ? value : "(unset)");
  }
}

} // namespace
} // namespace fctest
