// VERIFY.md's tolerance rule. For every element, given the kernel's value,
// the float64 oracle's and the naive float32 implementations' (rounded to
// the output dtype; see naive_attention.h for why there are two):
//   err_base = max |naive - oracle|      (over the whole case and both)
//   pass when |kernel - oracle| <= 2 * err_base + floor_ulps * ulp(|oracle|)
// and NaN where the oracle has none, or none where it has one, fails, as
// does any difference on an infinite oracle value (lse = -inf). The rule
// also refuses a case whose err_base is implausibly large: that means the
// naive implementation and the oracle disagree on semantics (a test bug),
// and a loose bound would let kernel bugs through.
#ifndef FLASHCPU_TESTS_TOLERANCE_H
#define FLASHCPU_TESTS_TOLERANCE_H

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "flashcpu/flashcpu.h"

namespace fctest {

struct ElementIndex {
  int64_t b = 0, h = 0, i = 0, d = 0; // d == -1: the row's lse
};

class ToleranceRule {
public:
  // what: a name for messages ("out", "lse"); dtype: the stored dtype of the
  // compared values (f32 for lse).
  ToleranceRule(std::string what, flashcpu_dtype dtype, int floor_ulps = 2);

  void Add(double kernel, double oracle, std::initializer_list<double> naive,
           const ElementIndex &where);
  // The kernel rounds P to bf16 (its naive values do too): P's relative
  // error of 2^-9 moves an output by up to that much of the largest |v|,
  // which the test-bug guard on err_base must allow.
  void AllowBf16Weights(double max_abs_value) {
    weights_allowance_ = std::ldexp(max_abs_value, -8);
  }
  testing::AssertionResult Verdict() const;

  double err_base() const { return err_base_; }
  double max_error() const { return max_error_; }
  int64_t count() const { return count_; }

private:
  std::string what_;
  flashcpu_dtype dtype_;
  int floor_ulps_;
  double weights_allowance_ = 0.0;
  int64_t count_ = 0;
  double err_base_ = 0.0;
  double max_abs_oracle_ = 0.0;
  double max_error_ = 0.0;
  // Largest |kernel - oracle| - floor seen, and where; compared with
  // 2 * err_base once err_base is known.
  double max_excess_ = -INFINITY;
  ElementIndex worst_;
  double worst_kernel_ = 0.0, worst_oracle_ = 0.0;
  // Elements whose NaN-ness or infinity differs from the oracle's.
  int64_t special_mismatches_ = 0;
  std::string first_special_mismatch_;
};

std::string DescribeIndex(const ElementIndex &where);

} // namespace fctest

#endif // FLASHCPU_TESTS_TOLERANCE_H
