#include "tolerance.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "fixtures.h"

namespace fctest {

std::string DescribeIndex(const ElementIndex &where) {
  std::ostringstream text;
  text << "(b=" << where.b << ", h=" << where.h << ", i=" << where.i;
  if (where.d >= 0) text << ", d=" << where.d;
  text << ")";
  return text.str();
}

ToleranceRule::ToleranceRule(std::string what, flashcpu_dtype dtype,
                             int floor_ulps)
    : what_(std::move(what)), dtype_(dtype), floor_ulps_(floor_ulps) {}

void ToleranceRule::Add(double kernel, double oracle,
                        std::initializer_list<double> naive,
                        const ElementIndex &where) {
  count_++;
  const bool special = std::isnan(oracle) || std::isinf(oracle) ||
                       std::isnan(kernel) || std::isinf(kernel);
  if (special) {
    const bool same =
        (std::isnan(oracle) && std::isnan(kernel)) || kernel == oracle;
    if (!same) {
      if (special_mismatches_++ == 0) {
        std::ostringstream text;
        text << what_ << DescribeIndex(where) << ": kernel " << kernel
             << ", oracle " << oracle;
        first_special_mismatch_ = text.str();
      }
    }
    return;
  }
  for (double value : naive)
    if (std::isfinite(value))
      err_base_ = std::fmax(err_base_, std::fabs(value - oracle));
  max_abs_oracle_ = std::fmax(max_abs_oracle_, std::fabs(oracle));
  const double error = std::fabs(kernel - oracle);
  max_error_ = std::fmax(max_error_, error);
  const double excess = error - floor_ulps_ * UlpOf(dtype_, oracle);
  if (excess > max_excess_) {
    max_excess_ = excess;
    worst_ = where;
    worst_kernel_ = kernel;
    worst_oracle_ = oracle;
  }
}

testing::AssertionResult ToleranceRule::Verdict() const {
  if (special_mismatches_ > 0)
    return testing::AssertionFailure()
           << special_mismatches_ << " " << what_
           << " element(s) differ from the oracle in NaN/infinity; first: "
           << first_special_mismatch_;
  // Plain float32 attention is accurate to well under this; more means the
  // naive reference does not compute what the oracle computes.
  const double sane_limit = 16 * UlpOf(dtype_, max_abs_oracle_) +
                            1e-3 * max_abs_oracle_ + weights_allowance_;
  if (err_base_ > sane_limit)
    return testing::AssertionFailure()
           << "test bug: naive float32 " << what_ << " is " << err_base_
           << " from the oracle (limit " << sane_limit << ")";
  if (max_excess_ > 2 * err_base_)
    return testing::AssertionFailure()
           << what_ << DescribeIndex(worst_) << ": kernel " << worst_kernel_
           << ", oracle " << worst_oracle_ << ", |diff| "
           << std::fabs(worst_kernel_ - worst_oracle_) << " > 2 * err_base ("
           << err_base_ << ") + " << floor_ulps_ << " ulp of "
           << flashcpu_dtype_name(dtype_);
  return testing::AssertionSuccess();
}

} // namespace fctest
