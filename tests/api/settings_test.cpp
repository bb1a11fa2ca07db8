// The settings of a context (splitkv_max_rows, launch, prefill_bf16_dot,
// decode_bf16_dot, decode_prefetch, kernel): the built-in defaults, then
// the tune file, then the option fields, each winning over the one before;
// option values out of range fail context creation naming the field.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "fixtures.h"

namespace fctest {
namespace {

// A version-2 tune file holding `body`, removed with the object.
class TuneText {
 public:
  explicit TuneText(const std::string &body) {
    const char *tmp = std::getenv("TMPDIR");
    static int count = 0;
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/flashcpu_settings_test_" +
            std::to_string(getpid()) + "_" + std::to_string(count++) + ".tune";
    FILE *file = std::fopen(path_.c_str(), "wb");
    EXPECT_NE(file, nullptr) << path_;
    if (file) {
      std::fputs(("flashcpu-tune 2\n" + body).c_str(), file);
      std::fclose(file);
    }
  }
  ~TuneText() { std::remove(path_.c_str()); }
  const char *path() const { return path_.c_str(); }

 private:
  std::string path_;
};

class Settings : public testing::Test {
 protected:
  ScopedEnv no_env_file_{"FLASHCPU_TUNE_FILE", nullptr};
};

struct OneSetting {
  const char *key;
  std::string default_value, file_value, option_value;
  void (*set_option)(flashcpu_context_options &);
};

std::vector<OneSetting> EverySetting() {
  const bool amd = VendorIsAmd();
  const bool amd_bf16 = amd && CpuHasFeature("avx512_bf16");
  return {
      {"splitkv_max_rows", "8", "3", "5", [](flashcpu_context_options &o) { o.splitkv_max_rows = 5; }},
      {"launch", "pool", "region", "pool", [](flashcpu_context_options &o) { o.launch = FLASHCPU_LAUNCH_POOL; }},
      {"prefill_bf16_dot", "off", "on", "off",
       [](flashcpu_context_options &o) { o.prefill_bf16_dot = FLASHCPU_SETTING_OFF; }},
      {"prefill_amx", "on", "off", "on",
       [](flashcpu_context_options &o) { o.prefill_amx = FLASHCPU_SETTING_ON; }},
      {"decode_bf16_dot", amd_bf16 ? "on" : "off", amd_bf16 ? "off" : "on", amd_bf16 ? "on" : "off",
       [](flashcpu_context_options &o) {
         const bool on = VendorIsAmd() && CpuHasFeature("avx512_bf16");
         o.decode_bf16_dot = on ? FLASHCPU_SETTING_ON : FLASHCPU_SETTING_OFF;
       }},
      {"decode_prefetch", amd ? "l1" : "l2", amd ? "l2" : "l1", amd ? "l1" : "l2",
       [](flashcpu_context_options &o) {
         o.decode_prefetch = VendorIsAmd() ? FLASHCPU_PREFETCH_L1 : FLASHCPU_PREFETCH_L2;
       }},
      {"team_level", "auto", "l3", "core",
       [](flashcpu_context_options &o) { o.team_level = FLASHCPU_TEAM_CORE; }},
      {"max_team_size", "0", "2", "3", [](flashcpu_context_options &o) { o.max_team_size = 3; }},
  };
}

// The tune file's team shape is the context's: the same teams as the same
// fields given as options.
TEST_F(Settings, TuneFileTeamShapeShapesTheTeams) {
  for (int threads : {2, 4}) {
    flashcpu_context_options options = DefaultOptions();
    options.num_threads = threads;
    options.team_level = FLASHCPU_TEAM_L3;
    options.max_team_size = 2;
    Context by_options(options);
    ASSERT_TRUE(by_options.ok()) << flashcpu_last_error(nullptr);

    TuneText file("team_level = l3\nmax_team_size = 2\n");
    options = DefaultOptions();
    options.num_threads = threads;
    options.tune_file = file.path();
    Context by_file(options);
    ASSERT_TRUE(by_file.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(flashcpu_context_num_teams(by_file), flashcpu_context_num_teams(by_options))
        << threads << " threads";

    options.team_level = FLASHCPU_TEAM_CORE;  // the option wins
    options.max_team_size = 0;
    Context core(options);
    ASSERT_TRUE(core.ok()) << flashcpu_last_error(nullptr);
    options = DefaultOptions();
    options.num_threads = threads;
    options.team_level = FLASHCPU_TEAM_CORE;
    Context plain_core(options);
    ASSERT_TRUE(plain_core.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(flashcpu_context_num_teams(core), flashcpu_context_num_teams(plain_core))
        << threads << " threads";
  }
}

TEST_F(Settings, OptionWinsOverTuneFileWhichWinsOverDefaults) {
  for (const OneSetting &s : EverySetting()) {
    SCOPED_TRACE(s.key);
    flashcpu_context_options options = DefaultOptions();
    options.num_threads = 1;
    Context defaults(options);
    ASSERT_TRUE(defaults.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(DescribedSetting(defaults, s.key), s.default_value);

    TuneText file(std::string(s.key) + " = " + s.file_value + "\n");
    options.tune_file = file.path();
    Context from_file(options);
    ASSERT_TRUE(from_file.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(DescribedSetting(from_file, s.key), s.file_value);

    s.set_option(options);
    Context from_option(options);
    ASSERT_TRUE(from_option.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(DescribedSetting(from_option, s.key), s.option_value);
  }
}

TEST_F(Settings, AutoOptionsKeepTheTuneFilesValues) {
  TuneText file("splitkv_max_rows = 12\nlaunch = region\nprefill_bf16_dot = on\n"
                "decode_bf16_dot = on\ndecode_prefetch = l2\n");
  flashcpu_context_options options = DefaultOptions();  // every field at its default
  options.num_threads = 1;
  options.tune_file = file.path();
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(context, "splitkv_max_rows"), "12");
  EXPECT_EQ(DescribedSetting(context, "launch"), "region");
  EXPECT_EQ(DescribedSetting(context, "prefill_bf16_dot"), "on");
  EXPECT_EQ(DescribedSetting(context, "decode_bf16_dot"), "on");
  EXPECT_EQ(DescribedSetting(context, "decode_prefetch"), "l2");
}

TEST_F(Settings, KernelOptionWinsOverTheTuneFile) {
  Context plain(DefaultOptions());
  ASSERT_TRUE(plain.ok());
  const std::vector<DescribedKernel> kernels = DescribedKernels(plain);
  ASSERT_FALSE(kernels.empty());
  TuneText file("kernel = " + kernels.front().name + "\n");
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  options.tune_file = file.path();
  Context from_file(options);
  ASSERT_TRUE(from_file.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(from_file, "kernel"), kernels.front().name);
  options.kernel = kernels.back().name.c_str();
  Context from_option(options);
  ASSERT_TRUE(from_option.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(from_option, "kernel"), kernels.back().name);
  options.kernel = "auto";
  Context automatic(options);
  ASSERT_TRUE(automatic.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(automatic, "kernel"), "auto");
}

TEST_F(Settings, ThreadCountDoesNotChangeThem) {
  std::string first;
  for (int threads : {1, 2, 3}) {
    flashcpu_context_options options = DefaultOptions();
    options.num_threads = threads;
    Context context(options);
    ASSERT_TRUE(context.ok());
    const std::string text = ContextDescription(context);
    const std::string line = text.substr(text.find("\nsettings: "));
    if (first.empty()) first = line.substr(0, line.find('\n', 1));
    EXPECT_EQ(line.substr(0, line.find('\n', 1)), first) << threads << " threads";
  }
}

struct BadOption {
  const char *name;
  void (*breaks)(flashcpu_context_options &);
  const char *field;
};

class SettingsBadOption : public Settings, public testing::WithParamInterface<BadOption> {};

TEST_P(SettingsBadOption, FailsNamingTheField) {
  flashcpu_context_options options = DefaultOptions();
  GetParam().breaks(options);
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_FALSE(context.ok());
  const std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find(GetParam().field), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, SettingsBadOption,
    testing::Values(
        BadOption{"rows_65", [](flashcpu_context_options &o) { o.splitkv_max_rows = 65; }, "splitkv_max_rows"},
        BadOption{"rows_minus_2", [](flashcpu_context_options &o) { o.splitkv_max_rows = -2; }, "splitkv_max_rows"},
        BadOption{"launch_3", [](flashcpu_context_options &o) { o.launch = static_cast<flashcpu_launch_mode>(3); }, "launch"},
        BadOption{"prefill_dot_3", [](flashcpu_context_options &o) { o.prefill_bf16_dot = static_cast<flashcpu_setting>(3); }, "prefill_bf16_dot"},
        BadOption{"prefill_amx_4", [](flashcpu_context_options &o) { o.prefill_amx = static_cast<flashcpu_setting>(4); }, "prefill_amx"},
        BadOption{"decode_dot_minus_1", [](flashcpu_context_options &o) { o.decode_bf16_dot = static_cast<flashcpu_setting>(-1); }, "decode_bf16_dot"},
        BadOption{"prefetch_3", [](flashcpu_context_options &o) { o.decode_prefetch = static_cast<flashcpu_prefetch_level>(3); }, "decode_prefetch"},
        BadOption{"kernel_unknown", [](flashcpu_context_options &o) { o.kernel = "no_such_kernel"; }, "no_such_kernel"},
        BadOption{"kernel_empty", [](flashcpu_context_options &o) { o.kernel = ""; }, "kernel"}),
    [](const testing::TestParamInfo<BadOption> &param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace fctest
