// The tune file (`flashcpu tune`'s output, version 2): its grammar, each
// error with its message, where it comes from (the option tune_file, else
// FLASHCPU_TUNE_FILE), and the option struct of 0.1.0. The
// settings a context ends up with are read from the describe text's
// "settings: key=value ..." line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fixtures.h"
#include "flashcpu/flashcpu.h"

namespace fctest {
namespace {

// The default settings line for this CPU (decode_bf16_dot and
// decode_prefetch depend on the vendor and AVX512-BF16).
std::string DefaultSettings() {
  const bool amd = VendorIsAmd();
  return std::string("splitkv_max_rows=8 launch=pool prefill_bf16_dot=off "
                     "prefill_amx=on "
                     "decode_bf16_dot=") +
         (amd && CpuHasFeature("avx512_bf16") ? "on" : "off") +
         " decode_prefetch=" + (amd ? "l1" : "l2") +
         " kernel=auto team_level=auto max_team_size=0 prefill_tile_slots=0";
}

// The whole settings line of ctx.
std::string SettingsLine(const flashcpu_context *ctx) {
  const std::string text = ContextDescription(ctx);
  const size_t at = text.find("\nsettings: ");
  if (at == std::string::npos) return "";
  return text.substr(at + 11, text.find('\n', at + 1) - at - 11);
}

// `line` with key's value replaced.
std::string With(std::string line, const std::string &key,
                 const std::string &value) {
  const size_t at = line.find(key + "=");
  const size_t end = line.find(' ', at);
  return line.replace(at, (end == std::string::npos ? line.size() : end) - at,
                      key + "=" + value);
}

class TuneFile : public ::testing::Test {
protected:
  void TearDown() override {
    for (const std::string &path : files_) std::remove(path.c_str());
  }

  // A file in the temporary folder holding `text`.
  std::string Write(const std::string &text) {
    const char *tmp = std::getenv("TMPDIR");
    std::string test =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char &c : test)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") +
                       "/flashcpu_tune_test_" + std::to_string(getpid()) + "_" +
                       std::to_string(files_.size()) + "_" + test + ".tune";
    FILE *file = std::fopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr) << path;
    if (file) {
      std::fwrite(text.data(), 1, text.size(), file);
      std::fclose(file);
    }
    files_.push_back(path);
    return path;
  }

  // Creates a context with tune_file = path (nullptr: none); returns the
  // status and, on success, its settings line.
  flashcpu_status Create(const char *path, std::string *settings) {
    flashcpu_context_options options = DefaultOptions();
    options.num_threads = 1;
    options.tune_file = path;
    Context context;
    const flashcpu_status status = context.Create(options);
    if (status == FLASHCPU_OK)
      *settings = SettingsLine(context);
    else
      EXPECT_FALSE(context.ok());
    return status;
  }

  std::string SettingsOf(const std::string &text) {
    std::string path = Write(text), settings;
    EXPECT_EQ(Create(path.c_str(), &settings), FLASHCPU_OK)
        << flashcpu_last_error(nullptr);
    return settings;
  }

  // The tests here set FLASHCPU_TUNE_FILE themselves; none inherits it.
  ScopedEnv no_env_file_{"FLASHCPU_TUNE_FILE", nullptr};
  std::vector<std::string> files_;
};

TEST_F(TuneFile, NoFileGivesDefaults) {
  std::string settings;
  ASSERT_EQ(Create(nullptr, &settings), FLASHCPU_OK);
  EXPECT_EQ(settings, DefaultSettings());
}

struct KeyValue {
  const char *key, *value, *shown; // shown: the settings line's value
};
const KeyValue kEveryValue[] = {
    {"splitkv_max_rows", "0", "0"},
    {"splitkv_max_rows", "64", "64"},
    {"splitkv_max_rows", "16", "16"},
    {"launch", "pool", "pool"},
    {"launch", "region", "region"},
    {"prefill_bf16_dot", "on", "on"},
    {"prefill_bf16_dot", "off", "off"},
    {"prefill_amx", "off", "off"},
    {"prefill_amx", "on", "on"},
    {"decode_bf16_dot", "on", "on"},
    {"decode_bf16_dot", "off", "off"},
    {"decode_prefetch", "l1", "l1"},
    {"decode_prefetch", "l2", "l2"},
    {"kernel", "auto", "auto"},
    {"team_level", "auto", "auto"},
    {"team_level", "core", "core"},
    {"team_level", "l2", "l2"},
    {"team_level", "l3", "l3"},
    {"team_level", "numa", "numa"},
    {"max_team_size", "0", "0"},
    {"max_team_size", "2", "2"},
    {"max_team_size", "4096", "4096"},
    {"prefill_tile_slots", "0", "0"},
    {"prefill_tile_slots", "16", "16"},
    {"prefill_tile_slots", "8192", "8192"},
};

TEST_F(TuneFile, ReadsEveryKeyAndValue) {
  for (const KeyValue &kv : kEveryValue) {
    SCOPED_TRACE(std::string(kv.key) + " = " + kv.value);
    EXPECT_EQ(SettingsOf(std::string("flashcpu-tune 2\n") + kv.key + " = " +
                         kv.value + "\n"),
              With(DefaultSettings(), kv.key, kv.shown));
  }
}

TEST_F(TuneFile, AutoKeepsTheDefault) {
  EXPECT_EQ(SettingsOf(
                "flashcpu-tune 2\nprefill_bf16_dot = auto\nprefill_amx = auto\n"
                "decode_bf16_dot = auto\n"
                "decode_prefetch = auto\nkernel = auto\n"),
            DefaultSettings());
}

TEST_F(TuneFile, KernelNamesAKernelOfThisBuild) {
  // The first kernel the default context lists runs on this CPU.
  Context context(DefaultOptions());
  ASSERT_TRUE(context.ok());
  const std::vector<DescribedKernel> kernels = DescribedKernels(context);
  ASSERT_FALSE(kernels.empty()) << ContextDescription(context);
  EXPECT_EQ(
      SettingsOf("flashcpu-tune 2\nkernel = " + kernels.front().name + "\n"),
      With(DefaultSettings(), "kernel", kernels.front().name));
}

TEST_F(TuneFile, SeveralKeysInAnyOrder) {
  std::string expected = With(DefaultSettings(), "splitkv_max_rows", "3");
  expected = With(expected, "launch", "region");
  expected = With(expected, "decode_prefetch", "l2");
  EXPECT_EQ(
      SettingsOf("flashcpu-tune 2\ndecode_prefetch = l2\nsplitkv_max_rows = 3\n"
                 "launch = region\n"),
      expected);
}

TEST_F(TuneFile, CommentsBlankLinesSpacesAndCrlf) {
  EXPECT_EQ(
      SettingsOf(
          "# measured by flashcpu tune\n\n  flashcpu-tune   2  # header\r\n"
          "\t# launch = region\n"
          "splitkv_max_rows=4\r\n   decode_prefetch\t=\tl2   # why\n\n# end"),
      With(With(DefaultSettings(), "splitkv_max_rows", "4"), "decode_prefetch",
           "l2"));
}

TEST_F(TuneFile, MissingKeysKeepDefaults) {
  EXPECT_EQ(SettingsOf("flashcpu-tune 2\nsplitkv_max_rows = 2\n"),
            With(DefaultSettings(), "splitkv_max_rows", "2"));
  EXPECT_EQ(SettingsOf("flashcpu-tune 2\n"), DefaultSettings());
  EXPECT_EQ(SettingsOf("flashcpu-tune 2"),
            DefaultSettings()); // no final newline
}

struct BadFile {
  const char *name;
  const char *text;
  std::vector<std::string> message; // each must be in the error
};

class TuneFileBad : public TuneFile,
                    public ::testing::WithParamInterface<BadFile> {};

TEST_P(TuneFileBad, IsInvalidArgumentNamingFileAndLine) {
  const BadFile &bad = GetParam();
  const std::string path = Write(bad.text);
  std::string settings;
  EXPECT_EQ(Create(path.c_str(), &settings), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string error = flashcpu_last_error(nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("the context option tune_file"), std::string::npos)
      << error;
  for (const std::string &part : bad.message)
    EXPECT_NE(error.find(part), std::string::npos)
        << "missing \"" << part << "\" in: " << error;
}

INSTANTIATE_TEST_SUITE_P(
    Files, TuneFileBad,
    ::testing::Values(
        BadFile{"Empty", "", {"flashcpu-tune 2"}},
        BadFile{"OnlyComments", "# nothing\n\n", {"flashcpu-tune 2"}},
        BadFile{
            "NoHeader", "splitkv_max_rows = 4\n", {":1:", "flashcpu-tune 2"}},
        BadFile{"VersionOneRejected",
                "flashcpu-tune 1\nsplitkv_max_rows = 8\n",
                {":1:", "version 1", "version 2", "flashcpu tune again"}},
        BadFile{"VersionThree",
                "flashcpu-tune 3\n",
                {":1:", "version 3", "flashcpu tune again"}},
        BadFile{"VersionNotANumber", "flashcpu-tune two\n", {":1:", "\"two\""}},
        BadFile{"UnknownKey",
                "flashcpu-tune 2\nbogus = 1\n",
                {":2:", "unknown key \"bogus\"", "splitkv_max_rows",
                 "decode_prefetch", "kernel"}},
        BadFile{"RemovedKeyOnepassMinTiles",
                "flashcpu-tune 2\nonepass_min_tiles = 1\n",
                {":2:", "unknown key \"onepass_min_tiles\""}},
        BadFile{"RemovedKeyOnepassMaxKv",
                "flashcpu-tune 2\nonepass_max_kv = 512\n",
                {":2:", "unknown key \"onepass_max_kv\""}},
        BadFile{"NoEquals",
                "flashcpu-tune 2\nsplitkv_max_rows 4\n",
                {":2:", "key = value"}},
        BadFile{"RowsTooMany",
                "flashcpu-tune 2\nsplitkv_max_rows = 65\n",
                {":2:", "splitkv_max_rows", "0 to 64"}},
        BadFile{"RowsNegative",
                "flashcpu-tune 2\nsplitkv_max_rows = -1\n",
                {":2:", "splitkv_max_rows", "0 to 64"}},
        BadFile{"RowsNotANumber",
                "flashcpu-tune 2\nsplitkv_max_rows = many\n",
                {":2:", "\"many\""}},
        BadFile{"RowsTrailingText",
                "flashcpu-tune 2\nsplitkv_max_rows = 4 rows\n",
                {":2:", "\"4 rows\""}},
        BadFile{"RowsEmpty",
                "flashcpu-tune 2\nsplitkv_max_rows =\n",
                {":2:", "splitkv_max_rows"}},
        BadFile{"RowsOverflow",
                "flashcpu-tune 2\nsplitkv_max_rows = 99999999999999999999\n",
                {":2:", "splitkv_max_rows"}},
        BadFile{"LaunchBad",
                "flashcpu-tune 2\nlaunch = threads\n",
                {":2:", "launch", "\"threads\"", "pool or region"}},
        BadFile{"LaunchAutoIsNotAValue",
                "flashcpu-tune 2\nlaunch = auto\n",
                {":2:", "pool or region"}},
        BadFile{"PrefillDotBad",
                "flashcpu-tune 2\nprefill_bf16_dot = 1\n",
                {":2:", "prefill_bf16_dot", "auto, on or off"}},
        BadFile{"DecodeDotBad",
                "flashcpu-tune 2\ndecode_bf16_dot = yes\n",
                {":2:", "decode_bf16_dot", "auto, on or off"}},
        BadFile{"SwitchIsCaseSensitive",
                "flashcpu-tune 2\ndecode_bf16_dot = ON\n",
                {":2:", "decode_bf16_dot"}},
        BadFile{"PrefetchBad",
                "flashcpu-tune 2\ndecode_prefetch = l3\n",
                {":2:", "decode_prefetch", "auto, l1 or l2"}},
        BadFile{"KernelUnknown",
                "flashcpu-tune 2\nkernel = fc_no_such_kernel\n",
                {":2:", "fc_no_such_kernel", "no kernel of that name"}},
        BadFile{
            "KernelEmpty", "flashcpu-tune 2\nkernel =\n", {":2:", "kernel"}},
        BadFile{
            "TeamLevelBad",
            "flashcpu-tune 2\nteam_level = socket\n",
            {":2:", "team_level", "\"socket\"", "auto, core, l2, l3 or numa"}},
        BadFile{"TeamLevelIsCaseSensitive",
                "flashcpu-tune 2\nteam_level = L2\n",
                {":2:", "team_level"}},
        BadFile{"MaxTeamSizeTooLarge",
                "flashcpu-tune 2\nmax_team_size = 4097\n",
                {":2:", "max_team_size", "up to 4096"}},
        BadFile{"MaxTeamSizeNegative",
                "flashcpu-tune 2\nmax_team_size = -2\n",
                {":2:", "max_team_size", "0 (no limit)"}},
        BadFile{"TileSlotsBelow16",
                "flashcpu-tune 2\nprefill_tile_slots = 8\n",
                {":2:", "prefill_tile_slots", "16 to 8192"}},
        BadFile{"TileSlotsTooLarge",
                "flashcpu-tune 2\nprefill_tile_slots = 8193\n",
                {":2:", "prefill_tile_slots", "16 to 8192"}},
        BadFile{"MaxTeamSizeNotANumber",
                "flashcpu-tune 2\nmax_team_size = two\n",
                {":2:", "\"two\""}},
        BadFile{"DuplicateNamesBothLines",
                "flashcpu-tune 2\nsplitkv_max_rows = 1\n# x\nsplitkv_max_rows "
                "= 2\n",
                {":4:", "splitkv_max_rows", "twice", "line 2"}},
        BadFile{"DuplicateOnOneLine",
                "flashcpu-tune 2\nlaunch = pool; launch = region\n",
                {":2:", "launch", "twice", "line 2"}},
        BadFile{
            "DuplicateOfAnotherKey",
            "flashcpu-tune 2\nlaunch = pool\nkernel = auto\nlaunch = region\n",
            {":4:", "launch", "line 2"}}),
    [](const ::testing::TestParamInfo<BadFile> &param) {
      return std::string(param.param.name);
    });

TEST_F(TuneFile, MissingFileNamedExplicitly) {
  std::string settings;
  const char *path = "/nonexistent/flashcpu.tune";
  EXPECT_EQ(Create(path, &settings), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string error = flashcpu_last_error(nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

TEST_F(TuneFile, DirectoryIsUnreadable) {
  std::string settings;
  EXPECT_EQ(Create("/", &settings), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("/: cannot"),
            std::string::npos)
      << flashcpu_last_error(nullptr);
}

TEST_F(TuneFile, EmptyPathIsAnError) {
  std::string settings;
  EXPECT_EQ(Create("", &settings), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("tune_file"),
            std::string::npos);
}

TEST_F(TuneFile, EnvironmentFileWhenNoOption) {
  ScopedEnv file("FLASHCPU_TUNE_FILE",
                 Write("flashcpu-tune 2\nsplitkv_max_rows = 7\n").c_str());
  std::string settings;
  ASSERT_EQ(Create(nullptr, &settings), FLASHCPU_OK)
      << flashcpu_last_error(nullptr);
  EXPECT_EQ(settings, With(DefaultSettings(), "splitkv_max_rows", "7"));
  // And through a NULL options pointer.
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  EXPECT_EQ(DescribedSetting(ctx, "splitkv_max_rows"), "7");
  flashcpu_context_destroy(ctx);
}

TEST_F(TuneFile, EnvironmentFileErrorsNameTheVariable) {
  ScopedEnv file("FLASHCPU_TUNE_FILE",
                 Write("flashcpu-tune 2\nbogus = 1\n").c_str());
  std::string settings;
  EXPECT_EQ(Create(nullptr, &settings), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string error = flashcpu_last_error(nullptr);
  EXPECT_NE(error.find("FLASHCPU_TUNE_FILE"), std::string::npos) << error;
  EXPECT_NE(error.find(":2: unknown key"), std::string::npos) << error;
}

TEST_F(TuneFile, EmptyEnvironmentVariableMeansNone) {
  ScopedEnv file("FLASHCPU_TUNE_FILE", "");
  std::string settings;
  ASSERT_EQ(Create(nullptr, &settings), FLASHCPU_OK);
  EXPECT_EQ(settings, DefaultSettings());
}

TEST_F(TuneFile, OptionWinsOverEnvironment) {
  ScopedEnv file("FLASHCPU_TUNE_FILE",
                 Write("flashcpu-tune 2\nbogus = 1\n").c_str());
  EXPECT_EQ(SettingsOf("flashcpu-tune 2\nlaunch = region\n"),
            With(DefaultSettings(), "launch", "region"));
}

// 0.1.0's option struct ended before tune_file: a struct of that size is
// accepted, the fields past its end are never read (they keep their
// defaults), and the tune file then comes from FLASHCPU_TUNE_FILE.
TEST_F(TuneFile, StructSizeOfVersion010IsAcceptedWithoutTuneFile) {
  ScopedEnv file("FLASHCPU_TUNE_FILE",
                 Write("flashcpu-tune 2\nsplitkv_max_rows = 33\n").c_str());
  flashcpu_context_options options = DefaultOptions();
  options.tune_file = "/nonexistent/never/read"; // past an 0.1.0 struct's end
  options.settings = "splitkv_max_rows = 99";    // likewise: would be an error
  options.struct_size = offsetof(flashcpu_context_options, tune_file);
  options.num_threads = 1;
  Context context;
  ASSERT_EQ(context.Create(options), FLASHCPU_OK)
      << flashcpu_last_error(nullptr);
  EXPECT_EQ(SettingsLine(context),
            With(DefaultSettings(), "splitkv_max_rows", "33"));
}

// The settings string and the tune file share the grammar: one entry per
// line or several on a line separated by ';'.
TEST_F(TuneFile, SemicolonsSeparateEntriesOnALine) {
  EXPECT_EQ(
      SettingsOf("flashcpu-tune 2\nsplitkv_max_rows = 3; launch = region;\n"
                 "decode_prefetch = l2 # ; kernel = bogus\n"),
      With(With(With(DefaultSettings(), "splitkv_max_rows", "3"), "launch",
                "region"),
           "decode_prefetch", "l2"));
}

} // namespace
} // namespace fctest
