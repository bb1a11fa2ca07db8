// The registry-driven kernel tester (in the manner of XNNPACK's testers):
// every suite in this folder is instantiated over every row of the kernel
// registry (src/kernels/kernels.inc, as fc_attention_kernels[]) crossed
// with its cases. No test file names an ISA or a kernel: rows come from
// the registry, what a row computes from its takes() predicate, whether
// this CPU runs it from flashcpu_isa_supported and the row's CPU need.
//
//  - a context forces the row through the setting `kernel` (no environment
//    variable), so the row itself runs whatever the default choice would be;
//  - a case the row does not take (more rows than split-KV handles, q and k
//    not bf16 for the bf16-dot rows, ...) is filtered out when the suite is
//    instantiated (ForEveryKernel with a probe), or, where a test runs
//    several cases, passed over (Check returns false) and the test skipped
//    if the row took none of them;
//  - a row this CPU cannot run skips (GTEST_SKIP) with the reason;
//  - test names start with the row's name: fc_decode_splitkv__avx2__<case>.
#ifndef FLASHCPU_TESTS_KERNELS_KERNEL_TESTER_H
#define FLASHCPU_TESTS_KERNELS_KERNEL_TESTER_H

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "fixtures.h"

extern "C" {
#include "kernels/registry.h"
}

namespace fctest {

using Kernel = const fc_attention_kernel *;

// Every row of the registry, in its order.
std::vector<Kernel> AllKernels();
// Every row of one family.
std::vector<Kernel> KernelsOfFamily(fc_kernel_family family);

// Whether this CPU (and OS) runs the row; else false with the reason.
bool KernelRunsHere(Kernel kernel, std::string *why);
// Whether the row's takes() predicate accepts the case as configured so
// far (Build not needed); else false with the row's reason.
bool KernelTakes(Kernel kernel, const AttentionCase &c, std::string *why);

// A context that forces the row, with `threads` threads (0: default) and
// the team level given; kept for the process (a context starts threads).
// nullptr (and a test failure) if creation fails.
flashcpu_context *KernelContext(Kernel kernel, int threads = 0,
                                flashcpu_team_level team = FLASHCPU_TEAM_AUTO);
// The options KernelContext uses, for tests that add settings to them.
flashcpu_context_options KernelContextOptions(Kernel kernel, int threads = 0);

// One test of a suite: a row and a case.
template <typename Case> struct KernelParam {
  Kernel kernel;
  Case test_case;
};
struct NoCase {};

// kernel x cases; probe(kernel, case), when given, keeps only the pairs
// the row takes.
template <typename Case>
std::vector<KernelParam<Case>> ForEveryKernel(
    const std::vector<Case> &cases,
    const std::function<bool(Kernel, const Case &)> &probe = nullptr) {
  std::vector<KernelParam<Case>> params;
  for (Kernel kernel : AllKernels())
    for (const Case &c : cases)
      if (!probe || probe(kernel, c)) params.push_back({kernel, c});
  return params;
}
inline std::vector<KernelParam<NoCase>> ForEveryKernel() {
  return ForEveryKernel(std::vector<NoCase>{NoCase{}});
}

// A probe for cases that configure an AttentionCase.
template <typename Case>
std::function<bool(Kernel, const Case &)>
TakesConfigured(std::function<void(AttentionCase &, const Case &)> configure) {
  return [configure](Kernel kernel, const Case &test_case) {
    AttentionCase c;
    configure(c, test_case);
    return KernelTakes(kernel, c, nullptr);
  };
}

// The test name: the row's name, then the case's (if any).
template <typename Case>
std::function<std::string(const testing::TestParamInfo<KernelParam<Case>> &)>
KernelParamName(std::function<std::string(const Case &)> case_name) {
  return
      [case_name](const testing::TestParamInfo<KernelParam<Case>> &param_info) {
        return std::string(param_info.param.kernel->name) + "__" +
               case_name(param_info.param.test_case);
      };
}
inline std::string
KernelOnlyName(const testing::TestParamInfo<KernelParam<NoCase>> &param_info) {
  return param_info.param.kernel->name;
}

template <typename Case>
class KernelSuite : public testing::TestWithParam<KernelParam<Case>> {
protected:
  void SetUp() override {
    std::string why;
    if (!KernelRunsHere(kernel(), &why))
      GTEST_SKIP() << kernel()->name << ": " << why;
  }
  void TearDown() override {
    if (checked_ == 0 && !not_taken_.empty() && !this->HasFailure())
      GTEST_SKIP() << kernel()->name
                   << " takes none of this test's cases: " << not_taken_;
  }

  Kernel kernel() const { return this->GetParam().kernel; }
  const Case &test_case() const { return this->GetParam().test_case; }
  flashcpu_context *ctx(int threads = 0,
                        flashcpu_team_level team = FLASHCPU_TEAM_AUTO) {
    return KernelContext(kernel(), threads, team);
  }

  // Whether the row takes c; if not, remembered for the skip message.
  bool Takes(const AttentionCase &c) {
    std::string why;
    if (KernelTakes(kernel(), c, &why)) {
      checked_++;
      return true;
    }
    if (not_taken_.empty()) not_taken_ = why;
    return false;
  }
  // Runs c on the row (poisoned outputs, every element against the
  // oracle); false, running nothing, when the row does not take c.
  bool Check(AttentionCase &c, flashcpu_context *context = nullptr) {
    if (!Takes(c)) return false;
    flashcpu_context *use = context ? context : ctx();
    if (!use) {
      ADD_FAILURE() << "no context for " << kernel()->name;
      return false;
    }
    c.Test(use);
    return true;
  }
  // Runs c on the row and expects OK, without the oracle check (the test
  // checks what it needs); false when the row does not take c.
  bool RunOk(AttentionCase &c, flashcpu_context *context = nullptr) {
    if (!Takes(c)) return false;
    flashcpu_context *use = context ? context : ctx();
    if (!use) {
      ADD_FAILURE() << "no context for " << kernel()->name;
      return false;
    }
    const flashcpu_status status = c.Run(use);
    EXPECT_EQ(status, FLASHCPU_OK)
        << flashcpu_last_error(use) << "; " << c.Describe();
    return status == FLASHCPU_OK;
  }

private:
  int checked_ = 0;
  std::string not_taken_;
};

using KernelOnly = KernelSuite<NoCase>;

} // namespace fctest

#endif // FLASHCPU_TESTS_KERNELS_KERNEL_TESTER_H
