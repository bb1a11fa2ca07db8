// The tune file (`flashcpu tune`'s output): parsing, each error with its
// message, precedence (context option, FLASHCPU_TUNE_FILE,
// FLASHCPU_DECODE_THRESHOLDS, defaults) and that it changes the kernel.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention_case.h"
#include "flashcpu/flashcpu.h"

namespace {

const char *const kEnvNames[] = {"FLASHCPU_TUNE_FILE", "FLASHCPU_DECODE_THRESHOLDS",
                                 "FLASHCPU_VERBOSE"};

class TuneFile : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char *name : kEnvNames) {
      const char *value = std::getenv(name);
      saved_.push_back({name, value ? value : "", value != nullptr});
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const Saved &s : saved_) {
      if (s.was_set) setenv(s.name.c_str(), s.value.c_str(), 1);
      else unsetenv(s.name.c_str());
    }
    for (const std::string &path : files_) std::remove(path.c_str());
  }

  // A file in the test's temporary folder holding `text`.
  std::string Write(const std::string &text) {
    const char *tmp = std::getenv("TMPDIR");
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char &c : test)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/flashcpu_tune_test_" +
                       std::to_string(getpid()) + "_" + std::to_string(files_.size()) + "_" +
                       test + ".tune";
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
  // status and, on success, the describe text's decode choice line.
  flashcpu_status Create(const char *path, std::string *choice) {
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.num_threads = 1;
    options.tune_file = path;
    flashcpu_context *ctx = nullptr;
    flashcpu_status status = flashcpu_context_create(&options, &ctx);
    if (status == FLASHCPU_OK) {
      const std::string text = fctest::ContextDescription(ctx);
      size_t at = text.find("decode choice: ");
      *choice = at == std::string::npos ? "" : text.substr(at + 15, text.find('\n', at) - at - 15);
      flashcpu_context_destroy(ctx);
    } else {
      EXPECT_EQ(ctx, nullptr);
    }
    return status;
  }

  std::string ChoiceOf(const std::string &text) {
    std::string path = Write(text), choice;
    EXPECT_EQ(Create(path.c_str(), &choice), FLASHCPU_OK) << flashcpu_last_error(nullptr);
    return choice;
  }

  struct Saved {
    std::string name, value;
    bool was_set;
  };
  std::vector<Saved> saved_;
  std::vector<std::string> files_;
};

const char kDefaults[] = "onepass_min_tiles=0 onepass_max_kv=0 splitkv_max_rows=8";

TEST_F(TuneFile, NoFileGivesDefaults) {
  std::string choice;
  ASSERT_EQ(Create(nullptr, &choice), FLASHCPU_OK);
  EXPECT_EQ(choice, kDefaults);
}

TEST_F(TuneFile, ReadsEveryKey) {
  EXPECT_EQ(ChoiceOf("flashcpu-tune 1\nonepass_min_tiles = 64\nonepass_max_kv = 1024\n"
                     "splitkv_max_rows = 16\n"),
            "onepass_min_tiles=64 onepass_max_kv=1024 splitkv_max_rows=16");
}

TEST_F(TuneFile, CommentsBlankLinesSpacesAndCrlf) {
  EXPECT_EQ(ChoiceOf("# measured by flashcpu tune\n\n  flashcpu-tune   1  # header\r\n"
                     "\t# onepass_max_kv = 5\n"
                     "splitkv_max_rows=4\r\n   onepass_max_kv\t=\t512   # why\n\n# end"),
            "onepass_min_tiles=0 onepass_max_kv=512 splitkv_max_rows=4");
}

TEST_F(TuneFile, MissingKeysKeepDefaults) {
  EXPECT_EQ(ChoiceOf("flashcpu-tune 1\nsplitkv_max_rows = 2\n"),
            "onepass_min_tiles=0 onepass_max_kv=0 splitkv_max_rows=2");
  EXPECT_EQ(ChoiceOf("flashcpu-tune 1\n"), kDefaults);
  EXPECT_EQ(ChoiceOf("flashcpu-tune 1"), kDefaults);  // no final newline
}

struct BadFile {
  const char *name;
  const char *text;
  std::vector<std::string> message;  // each must be in the error
};

class TuneFileBad : public TuneFile, public ::testing::WithParamInterface<BadFile> {};

TEST_P(TuneFileBad, IsInvalidArgumentNamingFileAndLine) {
  const BadFile &bad = GetParam();
  std::string path = Write(bad.text), choice;
  EXPECT_EQ(Create(path.c_str(), &choice), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string error = flashcpu_last_error(nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("tune_file"), std::string::npos) << error;
  for (const std::string &part : bad.message)
    EXPECT_NE(error.find(part), std::string::npos) << "'" << part << "' not in: " << error;
}

INSTANTIATE_TEST_SUITE_P(
    Parse, TuneFileBad,
    ::testing::Values(
        BadFile{"Empty", "", {"empty", "flashcpu-tune 1"}},
        BadFile{"OnlyComments", "# nothing\n\n", {"empty"}},
        BadFile{"NoHeader", "splitkv_max_rows = 4\n", {":1:", "header line"}},
        BadFile{"OtherFormat", "\n[flashcpu]\n", {":2:", "header line"}},
        BadFile{"WrongVersion", "# x\nflashcpu-tune 2\n", {":2:", "version 2", "reads version 1"}},
        BadFile{"VersionNotNumber", "flashcpu-tune one\n", {":1:", "not a number"}},
        BadFile{"UnknownKey", "flashcpu-tune 1\n\nsplit_rows = 4\n", {":3:", "unknown key \"split_rows\""}},
        BadFile{"NoEquals", "flashcpu-tune 1\nonepass_max_kv 4\n", {":2:", "key = value"}},
        BadFile{"EmptyKey", "flashcpu-tune 1\n= 4\n", {":2:", "unknown key"}},
        BadFile{"NegativeValue", "flashcpu-tune 1\nonepass_max_kv = -1\n", {":2:", "onepass_max_kv", "from 0"}},
        BadFile{"NotANumber", "flashcpu-tune 1\nonepass_min_tiles = many\n", {":2:", "\"many\""}},
        BadFile{"TrailingText", "flashcpu-tune 1\nonepass_min_tiles = 4 tiles\n", {":2:", "\"4 tiles\""}},
        BadFile{"EmptyValue", "flashcpu-tune 1\nonepass_min_tiles =\n", {":2:", "onepass_min_tiles"}},
        BadFile{"Overflow", "flashcpu-tune 1\nonepass_max_kv = 99999999999999999999\n", {":2:"}},
        BadFile{"RowsOverMax", "flashcpu-tune 1\nsplitkv_max_rows = 65\n", {":2:", "from 0 to 64"}},
        BadFile{"Duplicate", "flashcpu-tune 1\nonepass_max_kv = 1\nonepass_max_kv = 2\n",
                {":3:", "twice", "line 2"}}),
    [](const ::testing::TestParamInfo<BadFile> &param) { return std::string(param.param.name); });

TEST_F(TuneFile, MissingFileNamedExplicitly) {
  std::string choice;
  const char *path = "/nonexistent/flashcpu.tune";
  EXPECT_EQ(Create(path, &choice), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string error = flashcpu_last_error(nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

TEST_F(TuneFile, DirectoryIsUnreadable) {
  std::string choice;
  EXPECT_EQ(Create("/", &choice), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("/: cannot"), std::string::npos)
      << flashcpu_last_error(nullptr);
}

TEST_F(TuneFile, EmptyPathIsAnError) {
  std::string choice;
  EXPECT_EQ(Create("", &choice), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("tune_file"), std::string::npos);
}

TEST_F(TuneFile, EnvironmentFileWhenNoOption) {
  setenv("FLASHCPU_TUNE_FILE", Write("flashcpu-tune 1\nonepass_max_kv = 77\n").c_str(), 1);
  std::string choice;
  ASSERT_EQ(Create(nullptr, &choice), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  EXPECT_EQ(choice, "onepass_min_tiles=0 onepass_max_kv=77 splitkv_max_rows=8");
  // And through a NULL options pointer.
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  char text[8192];
  flashcpu_context_describe(ctx, text, sizeof text);
  EXPECT_NE(std::string(text).find("onepass_max_kv=77"), std::string::npos) << text;
  flashcpu_context_destroy(ctx);
}

TEST_F(TuneFile, EnvironmentFileErrorsNameTheVariable) {
  setenv("FLASHCPU_TUNE_FILE", Write("flashcpu-tune 1\nbogus = 1\n").c_str(), 1);
  std::string choice;
  EXPECT_EQ(Create(nullptr, &choice), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string error = flashcpu_last_error(nullptr);
  EXPECT_NE(error.find("FLASHCPU_TUNE_FILE"), std::string::npos) << error;
  EXPECT_NE(error.find(":2: unknown key"), std::string::npos) << error;
}

TEST_F(TuneFile, EmptyEnvironmentVariableMeansNone) {
  setenv("FLASHCPU_TUNE_FILE", "", 1);
  std::string choice;
  ASSERT_EQ(Create(nullptr, &choice), FLASHCPU_OK);
  EXPECT_EQ(choice, kDefaults);
}

TEST_F(TuneFile, OptionWinsOverEnvironment) {
  setenv("FLASHCPU_TUNE_FILE", Write("flashcpu-tune 1\nbogus = 1\n").c_str(), 1);
  EXPECT_EQ(ChoiceOf("flashcpu-tune 1\nonepass_min_tiles = 5\n"),
            "onepass_min_tiles=5 onepass_max_kv=0 splitkv_max_rows=8");
}

TEST_F(TuneFile, ThresholdsVariableOverridesSingleValues) {
  setenv("FLASHCPU_DECODE_THRESHOLDS", "splitkv_max_rows=3", 1);
  EXPECT_EQ(ChoiceOf("flashcpu-tune 1\nonepass_min_tiles = 5\nsplitkv_max_rows = 16\n"),
            "onepass_min_tiles=5 onepass_max_kv=0 splitkv_max_rows=3");
  setenv("FLASHCPU_TUNE_FILE", Write("flashcpu-tune 1\nonepass_max_kv = 9\n").c_str(), 1);
  std::string choice;
  ASSERT_EQ(Create(nullptr, &choice), FLASHCPU_OK);
  EXPECT_EQ(choice, "onepass_min_tiles=0 onepass_max_kv=9 splitkv_max_rows=3");
}

TEST_F(TuneFile, VerboseSaysWhereThresholdsCameFrom) {
  setenv("FLASHCPU_VERBOSE", "1", 1);
  std::string choice;
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(Create(nullptr, &choice), FLASHCPU_OK);
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("decode thresholds from built-in defaults"), std::string::npos) << log;

  std::string path = Write("flashcpu-tune 1\nonepass_max_kv = 9\n");
  setenv("FLASHCPU_DECODE_THRESHOLDS", "onepass_min_tiles=2", 1);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(Create(path.c_str(), &choice), FLASHCPU_OK);
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("decode thresholds from tune file " + path +
                     " (the context option tune_file), then "
                     "FLASHCPU_DECODE_THRESHOLDS=onepass_min_tiles=2: "
                     "onepass_min_tiles=2 onepass_max_kv=9 splitkv_max_rows=8"),
            std::string::npos)
      << log;
}

TEST_F(TuneFile, StructSizeOfVersion01IsAcceptedWithoutTuneFile) {
  setenv("FLASHCPU_TUNE_FILE", Write("flashcpu-tune 1\nonepass_max_kv = 33\n").c_str(), 1);
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.tune_file = "/nonexistent/never/read";  // past an 0.1 struct's end
  options.struct_size = offsetof(flashcpu_context_options, tune_file);
  options.num_threads = 1;
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  char text[8192];
  flashcpu_context_describe(ctx, text, sizeof text);
  EXPECT_NE(std::string(text).find("onepass_max_kv=33"), std::string::npos) << text;
  flashcpu_context_destroy(ctx);
}

// Runs one attention call of `rows` query rows against 512 keys with
// FLASHCPU_VERBOSE=1 and returns the kernel the log names.
// Whether the default context's kernel table has a one-pass decode kernel.
bool HasOnePassKernel() {
  flashcpu_context *ctx = nullptr;
  if (flashcpu_context_create(nullptr, &ctx) != FLASHCPU_OK) return false;
  std::vector<char> text(flashcpu_context_describe(ctx, nullptr, 0) + 1);
  flashcpu_context_describe(ctx, text.data(), text.size());
  flashcpu_context_destroy(ctx);
  return std::string(text.data()).find("decode_onepass") != std::string::npos;
}

std::string KernelFor(const char *tune_path, int rows) {
  enum { S = 512, HQ = 8, HKV = 2, D = 64 };
  std::vector<float> q((size_t)rows * HQ * D, 0.01f), k((size_t)S * HKV * D, 0.02f),
      v((size_t)S * HKV * D, 0.5f), out((size_t)rows * HQ * D);
  setenv("FLASHCPU_VERBOSE", "1", 1);
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.tune_file = tune_path;
  options.num_threads = 1;
  flashcpu_context *ctx = nullptr;
  ::testing::internal::CaptureStderr();
  flashcpu_status status = flashcpu_context_create(&options, &ctx);
  flashcpu_tensor tq = flashcpu_tensor_bshd(q.data(), FLASHCPU_DTYPE_F32, 1, rows, HQ, D);
  flashcpu_tensor tk = flashcpu_tensor_bshd(k.data(), FLASHCPU_DTYPE_F32, 1, S, HKV, D);
  flashcpu_tensor tv = flashcpu_tensor_bshd(v.data(), FLASHCPU_DTYPE_F32, 1, S, HKV, D);
  flashcpu_tensor to = flashcpu_tensor_bshd(out.data(), FLASHCPU_DTYPE_F32, 1, rows, HQ, D);
  if (status == FLASHCPU_OK) status = flashcpu_attention(ctx, &tq, &tk, &tv, &to, nullptr, nullptr);
  std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("FLASHCPU_VERBOSE");
  flashcpu_context_destroy(ctx);
  EXPECT_EQ(status, FLASHCPU_OK) << flashcpu_last_error(nullptr);
  for (const std::string &line : {std::string("decode_onepass"), std::string("decode_splitkv"),
                                  std::string("prefill"), std::string("tiled")})
    if (log.find("attention B=") != std::string::npos &&
        log.find(line, log.find("attention B=")) != std::string::npos)
      return line;
  return "none: " + log;
}

TEST_F(TuneFile, ChangesTheChosenKernel) {
  if (KernelFor(nullptr, 1) != "decode_splitkv")
    GTEST_SKIP() << "no split-KV decode kernel on this ISA (defaults choose "
                 << KernelFor(nullptr, 1) << ")";
  // Where the ISA has no one-pass kernel (AVX2, NEON), thresholds that ask
  // for it keep split-KV.
  const std::string one_row = HasOnePassKernel() ? "decode_onepass" : "decode_splitkv";
  const std::string onepass = Write("flashcpu-tune 1\nonepass_max_kv = 512\n");
  const std::string tiles = Write("flashcpu-tune 1\nonepass_min_tiles = 2\n");
  const std::string prefill = Write("flashcpu-tune 1\nsplitkv_max_rows = 2\n");
  EXPECT_EQ(KernelFor(onepass.c_str(), 1), one_row);
  EXPECT_EQ(KernelFor(tiles.c_str(), 1), one_row);
  EXPECT_EQ(KernelFor(nullptr, 4), "decode_splitkv");
  EXPECT_EQ(KernelFor(prefill.c_str(), 2), "decode_splitkv");
  EXPECT_EQ(KernelFor(prefill.c_str(), 4), "prefill");
  const std::string short_kv = Write("flashcpu-tune 1\nonepass_max_kv = 511\n");
  EXPECT_EQ(KernelFor(short_kv.c_str(), 1), "decode_splitkv");
}

}  // namespace
