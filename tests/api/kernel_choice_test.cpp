// The choice of a kernel per call, through the public API: which kernel a
// call ran is read from FLASHCPU_VERBOSE's per-call line, the kernels a
// context tries (and their families) from flashcpu_context_describe. The
// tests name no kernel: they compare families and choices between
// settings, so they hold for any registry.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "fixtures.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, BF16 = FLASHCPU_DTYPE_BF16;
const char kSplitKv[] = "split-KV decode", kPrefill[] = "prefill";

// A context made with FLASHCPU_VERBOSE=1 (read at creation), so that every
// call logs its kernel; the creation log is dropped.
class VerboseContext {
public:
  explicit VerboseContext(flashcpu_context_options options) {
    ScopedEnv verbose("FLASHCPU_VERBOSE", "1");
    ScopedEnv no_file("FLASHCPU_TUNE_FILE", nullptr);
    StderrCapture capture;
    status_ = context_.Create(options);
  }
  flashcpu_status status() const { return status_; }
  flashcpu_context *get() const { return context_.get(); }

  // The kernel that ran c ("" if the log names none).
  std::string KernelOf(AttentionCase &c) {
    StderrCapture capture;
    const flashcpu_status status = c.Run(context_);
    const std::string log = capture.Take();
    EXPECT_EQ(status, FLASHCPU_OK)
        << flashcpu_last_error(context_) << "; " << c.Describe();
    const size_t line = log.find("[flashcpu] attention B=");
    const size_t dim = log.find(" D=", line);
    const size_t name = log.find(": ", dim);
    const size_t end = log.find(" (", name);
    if (line == std::string::npos || dim == std::string::npos ||
        name == std::string::npos || end == std::string::npos) {
      ADD_FAILURE() << "no kernel in the log: " << log;
      return "";
    }
    return log.substr(name + 2, end - name - 2);
  }
  // The family the describe text gives that kernel.
  std::string FamilyOf(const std::string &kernel) const {
    for (const DescribedKernel &k : DescribedKernels(context_))
      if (k.name == kernel) return k.family;
    return "";
  }
  bool HasFamily(const std::string &family) const {
    for (const DescribedKernel &k : DescribedKernels(context_))
      if (k.family == family) return true;
    return false;
  }
  // The family of the kernel that runs `rows` decode rows of dtype t.
  std::string FamilyFor(int64_t rows, flashcpu_dtype t = F32) {
    AttentionCase c;
    c.q_len(rows).kv_len(300).heads(4, 2).head_dim(64).dtypes(t, t, F32).seed(
        3);
    return FamilyOf(KernelOf(c));
  }

private:
  Context context_;
  flashcpu_status status_;
};

// One thread; splitkv_max_rows = rows where rows >= 0 (else the default).
flashcpu_context_options WithRows(int rows) {
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 1;
  if (rows >= 0)
    AddSetting(options, "splitkv_max_rows = " + std::to_string(rows));
  return options;
}

TEST(KernelChoice, DefaultsPickSplitKvUpToEightRowsAndPrefillBeyond) {
  VerboseContext ctx(WithRows(-1));
  ASSERT_EQ(ctx.status(), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  ASSERT_TRUE(ctx.HasFamily(kPrefill)) << ContextDescription(ctx.get());
  if (!ctx.HasFamily(kSplitKv)) {
    EXPECT_EQ(ctx.FamilyFor(1), kPrefill);
    GTEST_SKIP() << "no split-KV kernel on this context's ISA";
  }
  for (int64_t rows : {1, 2, 8})
    EXPECT_EQ(ctx.FamilyFor(rows), kSplitKv) << rows << " rows";
  for (int64_t rows : {9, 64, 65})
    EXPECT_EQ(ctx.FamilyFor(rows), kPrefill) << rows << " rows";
  for (int64_t rows : {1, 8})
    EXPECT_EQ(ctx.FamilyFor(rows, BF16), kSplitKv) << rows << " bf16 rows";
  EXPECT_EQ(ctx.FamilyFor(9, BF16), kPrefill);
}

TEST(KernelChoice, SplitKvMaxRowsSettingMovesTheBoundary) {
  struct Expect {
    int setting;
    int64_t rows;
    const char *family;
  };
  for (const Expect &e : {Expect{2, 2, kSplitKv}, Expect{2, 3, kPrefill},
                          Expect{0, 1, kPrefill}, Expect{64, 64, kSplitKv},
                          Expect{64, 65, kPrefill}, Expect{16, 16, kSplitKv}}) {
    VerboseContext ctx(WithRows(e.setting));
    ASSERT_EQ(ctx.status(), FLASHCPU_OK) << flashcpu_last_error(nullptr);
    if (!ctx.HasFamily(kSplitKv))
      GTEST_SKIP() << "no split-KV kernel on this context's ISA";
    EXPECT_EQ(ctx.FamilyFor(e.rows), e.family)
        << "splitkv_max_rows " << e.setting << ", " << e.rows << " rows";
  }
}

// The bf16 dot-product rows are chosen by their settings: with decode_bf16_dot
// (prefill_bf16_dot) on, a bf16 decode (prefill) call runs another kernel
// than with it off exactly when the context lists one more kernel of that
// family that takes bf16; by default the choice is that of the setting's
// documented default (decode: on exactly on AMD CPUs with AVX512-BF16;
// prefill: off).
struct DotSetting {
  const char *name;
  int64_t rows;
  bool default_on;
};

std::string KernelFor(const DotSetting &s, const char *value) {
  flashcpu_context_options options = WithRows(-1);
  AddSetting(options, std::string(s.name) + " = " + value);
  VerboseContext ctx(options);
  EXPECT_EQ(ctx.status(), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  AttentionCase c;
  c.q_len(s.rows)
      .kv_len(300)
      .heads(4, 2)
      .head_dim(64)
      .dtypes(BF16, BF16, F32)
      .seed(5);
  return ctx.KernelOf(c);
}

TEST(KernelChoice, Bf16DotSettingsAndTheirDefaults) {
  const bool amd_bf16 = VendorIsAmd() && CpuHasFeature("avx512_bf16");
  for (const DotSetting &s : {DotSetting{"decode_bf16_dot", 1, amd_bf16},
                              DotSetting{"prefill_bf16_dot", 40, false}}) {
    SCOPED_TRACE(s.name);
    Context plain(WithRows(-1));
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(DescribedSetting(plain, s.name), s.default_on ? "on" : "off");
    const std::string on = KernelFor(s, "on"), off = KernelFor(s, "off"),
                      automatic = KernelFor(s, "auto");
    EXPECT_EQ(automatic, s.default_on ? on : off);
    if (on == off) {
      std::cout << s.name << ": no dot-product kernel on this CPU; both run "
                << on << "\n";
    } else {
      // The dot-product kernel takes only bf16 q and k: f32 goes elsewhere.
      flashcpu_context_options options = WithRows(-1);
      AddSetting(options, std::string(s.name) + " = on");
      VerboseContext ctx(options);
      AttentionCase c;
      c.q_len(s.rows)
          .kv_len(300)
          .heads(4, 2)
          .head_dim(64)
          .dtypes(F32, BF16, F32)
          .seed(6);
      EXPECT_NE(ctx.KernelOf(c), on);
    }
  }
}

TEST(KernelChoice, ForcedKernelRunsForEveryCall) {
  Context plain(WithRows(-1));
  ASSERT_TRUE(plain.ok());
  const std::vector<DescribedKernel> kernels = DescribedKernels(plain);
  ASSERT_FALSE(kernels.empty());
  const std::string prefill =
      kernels.back().name; // the list ends with a prefill row
  flashcpu_context_options options = WithRows(-1);
  AddSetting(options, "kernel = " + prefill);
  VerboseContext ctx(options);
  ASSERT_EQ(ctx.status(), FLASHCPU_OK) << flashcpu_last_error(nullptr);
  AttentionCase one;
  one.q_len(1).kv_len(100).heads(2, 1).head_dim(32).seed(7);
  EXPECT_EQ(ctx.KernelOf(one), prefill);
  EXPECT_TRUE(one.CheckAgainstOracle());
}

TEST(KernelChoice, UnknownForcedKernelFailsNamingIt) {
  flashcpu_context_options options = WithRows(-1);
  options.settings = "kernel = fc_prefill_99x99__mmx";
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_FALSE(context.ok());
  const std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find("fc_prefill_99x99__mmx"), std::string::npos)
      << message;
  EXPECT_NE(message.find("kernel"), std::string::npos) << message;
}

TEST(KernelChoice, ForcedKernelAboveTheIsaCapFailsNamingIt) {
  Context plain(WithRows(-1));
  ASSERT_TRUE(plain.ok());
  if (flashcpu_context_isa(plain) == FLASHCPU_ISA_SCALAR)
    GTEST_SKIP() << "no ISA above scalar here";
  const std::string kernel = DescribedKernels(plain).front().name;
  flashcpu_context_options options = WithRows(-1);
  AddSetting(options, "kernel = " + kernel);
  options.max_isa = FLASHCPU_ISA_SCALAR;
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find(kernel), std::string::npos) << message;
  EXPECT_NE(message.find("cap"), std::string::npos) << message;
  // The same through FLASHCPU_ISA.
  options.max_isa = FLASHCPU_ISA_AUTO;
  ScopedEnv isa("FLASHCPU_ISA", "scalar");
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find(kernel), std::string::npos) << message;
}

TEST(KernelChoice, CallTheForcedKernelCannotTakeFailsAndWritesNothing) {
  Context plain(WithRows(-1));
  ASSERT_TRUE(plain.ok());
  std::string split_kv;
  for (const DescribedKernel &k : DescribedKernels(plain))
    if (k.family == kSplitKv) split_kv = k.name; // the last: takes every dtype
  if (split_kv.empty())
    GTEST_SKIP() << "no split-KV kernel on this context's ISA";
  flashcpu_context_options options = WithRows(-1);
  AddSetting(options, "kernel = " + split_kv);
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  AttentionCase c;
  c.q_len(65).kv_len(70).heads(2, 1).head_dim(16).seed(8).Build();
  ASSERT_EQ(c.Run(context), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string message = flashcpu_last_error(context);
  EXPECT_NE(message.find(split_kv), std::string::npos) << message;
  EXPECT_NE(message.find("65 rows"), std::string::npos) << message;
  for (int64_t i = 0; i < 65; i++)
    for (int64_t h = 0; h < 2; h++) {
      ASSERT_TRUE(std::isnan(c.lse_at(0, h, i)));
      for (int64_t d = 0; d < 16; d++)
        ASSERT_TRUE(std::isnan(c.out_at(0, i, h, d)));
    }
  // The context stays usable for a call the kernel takes.
  AttentionCase ok;
  ok.q_len(64).kv_len(70).heads(2, 1).head_dim(16).seed(9);
  ok.Test(context);
}

} // namespace
} // namespace fctest
