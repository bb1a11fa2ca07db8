// Forcing a kernel by name (the setting `kernel`), for every row of
// the registry: a row this CPU runs gives a context of the row's ISA that
// lists the row as forced and runs it for every call; a row it cannot run
// fails context creation with INVALID_ARGUMENT and a message naming it; a
// call the row does not take fails with INVALID_ARGUMENT naming the row and
// writes nothing.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

using ForcedKernel = KernelOnly;

TEST(ForcedKernelRegistry,
     NamesAreUniqueAndEveryFamilyEndsInARowTakingEverything) {
  std::vector<std::string> names;
  for (Kernel kernel : AllKernels()) {
    for (const std::string &name : names) EXPECT_NE(name, kernel->name);
    names.push_back(kernel->name);
    // A name is a test-name part: letters, digits and '_' only.
    for (const char ch : names.back())
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')
          << names.back();
  }
  // Every ISA's candidate list ends with a row that takes every problem (the
  // choice never runs out): the last row of each ISA has no takes().
  std::vector<flashcpu_isa> isas;
  for (Kernel kernel : AllKernels()) {
    bool seen = false;
    for (flashcpu_isa isa : isas) seen = seen || isa == kernel->isa;
    if (!seen) isas.push_back(kernel->isa);
  }
  for (flashcpu_isa isa : isas) {
    Kernel last = nullptr;
    for (Kernel kernel : AllKernels())
      if (kernel->isa == isa) last = kernel;
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(last->takes, nullptr)
        << flashcpu_isa_name(isa) << ": " << last->name;
  }
}

// Not SetUp's skip: this test is about rows this CPU cannot run too.
class ForcedKernelCreation
    : public testing::TestWithParam<KernelParam<NoCase>> {};

TEST_P(ForcedKernelCreation, RunsHereOrFailsNamingTheKernel) {
  const Kernel kernel = GetParam().kernel;
  std::string why;
  const bool runs = KernelRunsHere(kernel, &why);
  Context context;
  const flashcpu_status status = context.Create(KernelContextOptions(kernel));
  if (!runs) {
    EXPECT_EQ(status, FLASHCPU_ERROR_INVALID_ARGUMENT) << why;
    EXPECT_FALSE(context.ok());
    EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find(kernel->name),
              std::string::npos)
        << flashcpu_last_error(nullptr);
    return;
  }
  ASSERT_EQ(status, FLASHCPU_OK) << flashcpu_last_error(nullptr);
  EXPECT_EQ(flashcpu_context_isa(context), kernel->isa);
  EXPECT_EQ(DescribedSetting(context, "kernel"), kernel->name);
  EXPECT_NE(
      ContextDescription(context).find(std::string(kernel->name) + " (forced)"),
      std::string::npos)
      << ContextDescription(context);
}

// A cap below the row's ISA (where there is one) fails creation naming the
// row and the cap.
TEST_P(ForcedKernelCreation, AboveTheIsaCapFailsNamingIt) {
  const Kernel kernel = GetParam().kernel;
  if (kernel->isa == FLASHCPU_ISA_SCALAR) GTEST_SKIP() << "no ISA below scalar";
  flashcpu_context_options options = KernelContextOptions(kernel);
  options.max_isa = FLASHCPU_ISA_SCALAR;
  Context context;
  EXPECT_EQ(context.Create(options), FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string message = flashcpu_last_error(nullptr);
  EXPECT_NE(message.find(kernel->name), std::string::npos) << message;
  EXPECT_NE(message.find("cap"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(Kernels, ForcedKernelCreation,
                         testing::ValuesIn(ForEveryKernel()), KernelOnlyName);

// A call each row does not take: found by walking a few shapes through the
// row's takes() (rows that take everything skip).
TEST_P(ForcedKernel, CallItCannotTakeFailsAndWritesNothing) {
  std::vector<std::function<void(AttentionCase &)>> shapes = {
      [](AttentionCase &c) { c.q_len(65).kv_len(80).heads(2, 1).head_dim(16); },
      [](AttentionCase &c) {
        c.q_len(3).kv_len(80).heads(2, 1).head_dim(16).dtypes(
            FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F32);
      },
      [](AttentionCase &c) {
        c.q_len(70).kv_len(80).heads(2, 1).head_dim(15).dtypes(
            FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F32);
      },
  };
  int refused = 0;
  for (const auto &shape : shapes) {
    AttentionCase c;
    shape(c);
    std::string why;
    if (KernelTakes(kernel(), c, &why)) continue;
    refused++;
    c.Build();
    ASSERT_EQ(c.Run(ctx()), FLASHCPU_ERROR_INVALID_ARGUMENT) << c.Describe();
    const std::string message = flashcpu_last_error(ctx());
    EXPECT_NE(message.find(kernel()->name), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message << " / " << why;
    // Nothing written: out is still the poison Run put there, lse NaN.
    const AttentionCase::Shape s = c.shape();
    for (int64_t i = 0; i < s.q_len; i++)
      for (int64_t h = 0; h < s.q_heads; h++) {
        ASSERT_TRUE(std::isnan(c.lse_at(0, h, i)));
        for (int64_t d = 0; d < s.v_head_dim; d++)
          ASSERT_TRUE(std::isnan(c.out_at(0, i, h, d)));
      }
  }
  if (refused == 0)
    GTEST_SKIP() << kernel()->name << " takes every shape tried";
}

INSTANTIATE_TEST_SUITE_P(Kernels, ForcedKernel,
                         testing::ValuesIn(ForEveryKernel()), KernelOnlyName);

} // namespace
} // namespace fctest
