// The settings of a context: the built-in defaults, then the tune file,
// then the options' settings string (the tune file's grammar, key by key),
// then the fields team_level and max_team_size, each winning over the one
// before; a string with an unknown key, a bad value or a key given twice
// fails context creation naming the key and the value.
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
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") +
            "/flashcpu_settings_test_" + std::to_string(getpid()) + "_" +
            std::to_string(count++) + ".tune";
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
  std::string default_value, file_value, string_value;
};

std::vector<OneSetting> EverySetting() {
  const bool amd = VendorIsAmd();
  const bool amd_bf16 = amd && CpuHasFeature("avx512_bf16");
  return {
      {"splitkv_max_rows", "8", "3", "5"},
      {"launch", "pool", "region", "pool"},
      {"prefill_bf16_dot", "off", "on", "off"},
      {"prefill_amx", "on", "off", "on"},
      {"decode_bf16_dot", amd_bf16 ? "on" : "off", amd_bf16 ? "off" : "on",
       amd_bf16 ? "on" : "off"},
      {"decode_prefetch", amd ? "l1" : "l2", amd ? "l2" : "l1",
       amd ? "l1" : "l2"},
      {"team_level", "auto", "l3", "core"},
      {"max_team_size", "0", "2", "3"},
      {"prefill_tile_slots", "0", "384", "64"},
  };
}

// The tune file's team shape is the context's: the same teams as the same
// fields given as options, or as entries of the settings string.
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
    EXPECT_EQ(flashcpu_context_num_teams(by_file),
              flashcpu_context_num_teams(by_options))
        << threads << " threads";

    options.team_level = FLASHCPU_TEAM_CORE; // the field wins
    options.max_team_size = 0;
    Context core(options);
    ASSERT_TRUE(core.ok()) << flashcpu_last_error(nullptr);
    options.team_level = FLASHCPU_TEAM_AUTO;
    options.settings = "team_level = core"; // so does the string
    Context core_by_string(options);
    ASSERT_TRUE(core_by_string.ok()) << flashcpu_last_error(nullptr);
    options = DefaultOptions();
    options.num_threads = threads;
    options.team_level = FLASHCPU_TEAM_CORE;
    Context plain_core(options);
    ASSERT_TRUE(plain_core.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(flashcpu_context_num_teams(core),
              flashcpu_context_num_teams(plain_core))
        << threads << " threads";
    EXPECT_EQ(flashcpu_context_num_teams(core_by_string),
              flashcpu_context_num_teams(plain_core))
        << threads << " threads";
  }
}

TEST_F(Settings, StringWinsOverTuneFileWhichWinsOverDefaults) {
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

    const std::string entry = std::string(s.key) + "=" + s.string_value;
    options.settings = entry.c_str();
    Context from_string(options);
    ASSERT_TRUE(from_string.ok()) << flashcpu_last_error(nullptr);
    EXPECT_EQ(DescribedSetting(from_string, s.key), s.string_value);
  }
}

TEST_F(Settings, FieldsAwayFromTheirDefaultsWinOverTheTuneFile) {
  TuneText file("team_level = l3\nmax_team_size = 2\n");
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  options.tune_file = file.path();
  options.team_level = FLASHCPU_TEAM_CORE;
  options.max_team_size = 3;
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(context, "team_level"), "core");
  EXPECT_EQ(DescribedSetting(context, "max_team_size"), "3");
}

TEST_F(Settings, KeysTheStringLeavesOutKeepTheTuneFilesValues) {
  TuneText file(
      "splitkv_max_rows = 12\nlaunch = region\nprefill_bf16_dot = on\n"
      "decode_bf16_dot = on\ndecode_prefetch = l2\n");
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  options.tune_file = file.path();
  options.settings = "launch = pool; decode_prefetch = l1";
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(context, "splitkv_max_rows"), "12");
  EXPECT_EQ(DescribedSetting(context, "launch"), "pool");
  EXPECT_EQ(DescribedSetting(context, "prefill_bf16_dot"), "on");
  EXPECT_EQ(DescribedSetting(context, "decode_bf16_dot"), "on");
  EXPECT_EQ(DescribedSetting(context, "decode_prefetch"), "l1");
}

// NULL, "" and a string of blanks, empty entries and comments change
// nothing: the tune file's values (here none: the defaults) stand.
TEST_F(Settings, EmptyStringKeepsTheDefaults) {
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  Context plain(options);
  ASSERT_TRUE(plain.ok());
  const std::string text = ContextDescription(plain);
  const std::string expected = text.substr(text.find("\nsettings: "));
  for (const char *empty :
       {"", "   ", ";", " ; ;\n", "# only a comment", "\n\n"}) {
    SCOPED_TRACE(std::string("\"") + empty + "\"");
    options.settings = empty;
    Context context(options);
    ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
    const std::string described = ContextDescription(context);
    EXPECT_EQ(described.substr(described.find("\nsettings: ")), expected);
  }
}

// Entries end at ';' or a newline; blanks and comments as in a tune file.
TEST_F(Settings, StringGrammarIsTheTuneFiles) {
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  options.settings =
      "  splitkv_max_rows=4 ;launch\t=\tregion\r\n# decode_prefetch = l1\n"
      "prefill_amx = off # why\n;; max_team_size = 2;";
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(context, "splitkv_max_rows"), "4");
  EXPECT_EQ(DescribedSetting(context, "launch"), "region");
  EXPECT_EQ(DescribedSetting(context, "prefill_amx"), "off");
  EXPECT_EQ(DescribedSetting(context, "max_team_size"), "2");
  EXPECT_EQ(DescribedSetting(context, "decode_prefetch"),
            VendorIsAmd() ? "l1" : "l2");
}

TEST_F(Settings, KernelInTheStringWinsOverTheTuneFile) {
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
  const std::string forced = "kernel = " + kernels.back().name;
  options.settings = forced.c_str();
  Context from_string(options);
  ASSERT_TRUE(from_string.ok()) << flashcpu_last_error(nullptr);
  EXPECT_EQ(DescribedSetting(from_string, "kernel"), kernels.back().name);
  options.settings = "kernel = auto";
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
    EXPECT_EQ(line.substr(0, line.find('\n', 1)), first)
        << threads << " threads";
  }
}

// The string is read at creation only: the context keeps no pointer to it.
TEST_F(Settings, StringIsNotKeptByTheContext) {
  std::string text = "splitkv_max_rows = 6";
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  options.settings = text.c_str();
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  text.assign(text.size(), 'x');
  EXPECT_EQ(DescribedSetting(context, "splitkv_max_rows"), "6");
}

struct BadString {
  const char *name;
  const char *settings;
  std::vector<std::string> message; // each must be in the error
};

class SettingsBadString : public Settings,
                          public testing::WithParamInterface<BadString> {};

TEST_P(SettingsBadString, FailsNamingTheKeyAndValue) {
  flashcpu_context_options options = DefaultOptions();
  options.settings = GetParam().settings;
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_FALSE(context.ok());
  const std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find("options->settings"), std::string::npos) << message;
  for (const std::string &part : GetParam().message)
    EXPECT_NE(message.find(part), std::string::npos)
        << "missing \"" << part << "\" in: " << message;
}

INSTANTIATE_TEST_SUITE_P(
    Strings, SettingsBadString,
    testing::Values(
        BadString{"rows_65",
                  "splitkv_max_rows = 65",
                  {"splitkv_max_rows", "\"65\"", "0 to 64"}},
        BadString{"rows_minus_2",
                  "splitkv_max_rows=-2",
                  {"splitkv_max_rows", "\"-2\""}},
        BadString{"launch_auto",
                  "launch = auto",
                  {"launch", "\"auto\"", "pool or region"}},
        BadString{"prefill_dot_3",
                  "prefill_bf16_dot = 3",
                  {"prefill_bf16_dot", "\"3\"", "auto, on or off"}},
        BadString{
            "prefill_amx_yes", "prefill_amx = yes", {"prefill_amx", "\"yes\""}},
        BadString{"decode_dot_upper",
                  "decode_bf16_dot = ON",
                  {"decode_bf16_dot", "\"ON\""}},
        BadString{"prefetch_l3",
                  "decode_prefetch = l3",
                  {"decode_prefetch", "\"l3\"", "auto, l1 or l2"}},
        BadString{"team_level_socket",
                  "team_level = socket",
                  {"team_level", "\"socket\""}},
        BadString{"max_team_size_big",
                  "max_team_size = 4097",
                  {"max_team_size", "\"4097\""}},
        BadString{"kernel_unknown",
                  "kernel = no_such_kernel",
                  {"kernel", "no_such_kernel"}},
        BadString{"kernel_empty", "kernel =", {"kernel", "\"\""}},
        BadString{
            "unknown_key",
            "splitkv_max_rows = 4; bogus = 1",
            {"unknown key \"bogus\"", "splitkv_max_rows", "decode_prefetch"}},
        BadString{"removed_key",
                  "onepass_min_tiles = 1",
                  {"unknown key \"onepass_min_tiles\""}},
        BadString{
            "no_equals", "launch pool", {"key = value", "\"launch pool\""}},
        BadString{"duplicate_key",
                  "launch = pool; kernel = auto\nlaunch = region",
                  {"launch", "given twice"}},
        BadString{
            "header_is_not_an_entry", "flashcpu-tune 2", {"key = value"}}),
    [](const testing::TestParamInfo<BadString> &param_info) {
      return std::string(param_info.param.name);
    });

// A key given both as a field and in the string is refused rather than
// one of them guessed.
TEST_F(Settings, TeamFieldAndTheSameKeyInTheStringFail) {
  flashcpu_context_options options = DefaultOptions();
  options.team_level = FLASHCPU_TEAM_CORE;
  options.settings = "team_level = l3";
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find("team_level"), std::string::npos) << message;
  EXPECT_NE(message.find("both"), std::string::npos) << message;
  options = DefaultOptions();
  options.max_team_size = 2;
  options.settings = "max_team_size = 2";
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find("max_team_size"), std::string::npos) << message;
}

// A bad string fails however good the tune file is.
TEST_F(Settings, BadStringFailsOverAGoodTuneFile) {
  TuneText file("splitkv_max_rows = 4\n");
  flashcpu_context_options options = DefaultOptions();
  options.tune_file = file.path();
  options.settings = "splitkv_max_rows = many";
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find("\"many\""), std::string::npos) << message;
}

} // namespace
} // namespace fctest
