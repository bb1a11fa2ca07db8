// Sliding-window bounds and softcap ordering, with expectations written
// from the header's formulas (not from the oracle):
//  - ranked keys (structural_inputs.h) make row i's output exactly the V row
//    of the newest (sign +1) or oldest (sign -1) key it sees, so both window
//    edges are checked to the key: p - left <= j <= p + right, inclusive,
//    p = i + S_b - L, further limited by causal and [0, S_b);
//  - softcap applies before masks: a key hidden by causal, window, tree or
//    an additive -inf stays hidden, which a NaN in its V row would reveal.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"
#include "structural_inputs.h"

namespace fctest {
namespace {

// Window arithmetic that overflows int64 can send a kernel's key loop
// round 2^57 blocks; ctest's per-test timeout ends such a test (no timer
// here: a test must not depend on the machine's speed or load).

struct WindowCase {
  const char *name;
  int64_t q_len, kv_len;
  int64_t left, right;
  bool causal;
  std::vector<int64_t> kv_lengths; // empty: S for every batch
};

const WindowCase kWindowCases[] = {
    {"both_sides", 100, 100, 3, 5, false, {}},
    {"window_zero_sees_only_its_position", 100, 100, 0, 0, false, {}},
    {"window_zero_fewer_queries", 7, 90, 0, 0, false, {}},
    {"left_only", 70, 130, 17, -1, false, {}},
    {"right_only", 70, 130, -1, 2, false, {}},
    {"window_equal_to_S", 40, 64, 64, 64, false, {}},
    {"window_beyond_S", 40, 64, 1000, 1000, false, {}},
    {"window_int64_max", 40, 64, INT64_MAX, INT64_MAX, false, {}},
    {"window_int64_max_left_zero_right", 40, 64, INT64_MAX, 0, false, {}},
    {"left_zero_right_int64_max", 40, 64, 0, INT64_MAX, false, {}},
    {"more_queries_than_keys", 100, 30, 2, 2, false, {}},
    // Positions are negative here: p - left must not overflow either.
    {"left_int64_max_more_queries_than_keys", 100, 30, INT64_MAX, 5, false, {}},
    {"causal_with_left_window", 65, 200, 31, -1, true, {}},
    {"causal_right_window_is_moot", 65, 200, 4, 7, true, {}},
    {"window_across_kv_lengths", 33, 150, 20, 1, false, {150, 40}},
    {"window_wider_than_block", 130, 250, 70, 70, false, {}},
};

void ConfigureWindow(AttentionCase &c, const WindowCase &w) {
  c.batch(w.kv_lengths.empty() ? 1 : static_cast<int64_t>(w.kv_lengths.size()))
      .q_len(w.q_len)
      .kv_len(w.kv_len)
      .heads(4, 2)
      .head_dim(8)
      .causal(w.causal)
      .window(w.left, w.right);
  if (!w.kv_lengths.empty()) c.kv_lengths(w.kv_lengths);
}

using WindowEdges = KernelSuite<WindowCase>;

TEST_P(WindowEdges, RowsSeeExactlyTheInclusiveRange) {
  const WindowCase &w = test_case();
  const int64_t batch =
      w.kv_lengths.empty() ? 1 : static_cast<int64_t>(w.kv_lengths.size());
  AttentionCase c;
  c.batch(batch)
      .q_len(w.q_len)
      .kv_len(w.kv_len)
      .heads(4, 2)
      .head_dim(8)
      .causal(w.causal)
      .window(w.left, w.right)
      .scale(kRankScale)
      .seed(3);
  if (!w.kv_lengths.empty()) c.kv_lengths(w.kv_lengths);
  c.Build();
  RankKeys(c);
  SetExactValues(c, 5);
  if (!RunOk(c)) return;

  int64_t empty_rows = 0, rows = 0;
  for (int64_t b = 0; b < batch; b++) {
    const int64_t length = c.kv_length_of(b);
    for (int64_t i = 0; i < w.q_len; i++) {
      const int64_t p = i + length - w.q_len;
      // first and last visible key; each bound applied only when given.
      int64_t first = 0, last = length - 1;
      if (w.left >= 0 && p - first > w.left) first = p - w.left;
      if (w.right >= 0 && last - p > w.right) last = p + w.right;
      if (w.causal && last > p) last = p;
      for (int64_t h = 0; h < 4; h++) {
        rows++;
        if (first > last) { // sees nothing: zeros and -inf
          empty_rows++;
          for (int64_t d = 0; d < 8; d++)
            ASSERT_EQ(c.out_at(b, i, h, d), 0.0) << "row " << i;
          ASSERT_EQ(c.lse_at(b, h, i), -INFINITY) << "row " << i;
          continue;
        }
        const int64_t winner = RankSign(b, h, i) > 0 ? last : first;
        for (int64_t d = 0; d < 8; d++)
          ASSERT_EQ(c.out_at(b, i, h, d), c.v().Get(b, winner, h / 2, d))
              << "b=" << b << " row " << i << " head " << h
              << " should see keys [" << first << ", " << last
              << "]; expected key " << winner << "'s V row";
      }
    }
  }
  EXPECT_LT(empty_rows, rows);
}

INSTANTIATE_TEST_SUITE_P(Cases, WindowEdges,
                         testing::ValuesIn(ForEveryKernel<WindowCase>(
                             std::vector<WindowCase>(std::begin(kWindowCases),
                                                     std::end(kWindowCases)),
                             TakesConfigured<WindowCase>(ConfigureWindow))),
                         KernelParamName<WindowCase>([](const WindowCase &w) {
                           return std::string(w.name);
                         }));

// The same windows against the oracle with random inputs and the tolerance
// rule (so that lse and ordinary scores are covered too).
TEST_P(WindowEdges, RandomInputsMatchOracle) {
  const WindowCase &w = test_case();
  AttentionCase c;
  c.batch(w.kv_lengths.empty() ? 1 : static_cast<int64_t>(w.kv_lengths.size()))
      .q_len(w.q_len)
      .kv_len(w.kv_len)
      .heads(4, 2)
      .head_dim(8)
      .causal(w.causal)
      .window(w.left, w.right)
      .seed(9);
  if (!w.kv_lengths.empty()) c.kv_lengths(w.kv_lengths);
  Check(c);
}

// Keys hidden from some rows get V rows of 1000 (visible ones are below 1)
// and keys hidden from every row get NaN: a key that softcap made visible
// again (a mask applied before the softcap turns -inf into -cap) moves its
// rows far from the oracle's, or turns them NaN.
struct HiddenKeyCase {
  const char *name;
  void (*configure)(AttentionCase &);
  // Whether key j is hidden from row i (b = 0, S = 96, L = 40).
  bool (*hidden)(int64_t i, int64_t j);
};

constexpr int64_t kHiddenL = 40, kHiddenS = 96;

const HiddenKeyCase kHiddenKeyCases[] = {
    {"causal", [](AttentionCase &c) { c.causal(); },
     [](int64_t i, int64_t j) { return j > i + kHiddenS - kHiddenL; }},
    {"window", [](AttentionCase &c) { c.window(5, 5); },
     [](int64_t i, int64_t j) {
       const int64_t p = i + kHiddenS - kHiddenL;
       return j < p - 5 || j > p + 5;
     }},
    // Even keys are hidden from every row: set by the test below.
    {"additive_minus_inf",
     [](AttentionCase &c) { c.additive(AdditivePattern::kKeyPadding, 0.0); },
     [](int64_t, int64_t j) { return j % 2 == 0; }},
    {"tree", [](AttentionCase &c) { c.tree(kHiddenS, 1.0); },
     [](int64_t i, int64_t j) { return (i + j) % 3 == 0; }},
};

using SoftcapBeforeMask = KernelSuite<HiddenKeyCase>;

TEST_P(SoftcapBeforeMask, HiddenKeysStayHidden) {
  const HiddenKeyCase &hk = test_case();
  for (float cap : {0.5f, 30.0f}) {
    AttentionCase c;
    c.q_len(kHiddenL)
        .kv_len(kHiddenS)
        .heads(2, 1)
        .head_dim(16)
        .softcap(cap)
        .seed(21);
    hk.configure(c);
    c.Build();
    for (int64_t i = 0; i < kHiddenL; i++)
      for (int64_t j = 0; j < kHiddenS; j++) {
        if (c.params().additive_mask)
          for (int64_t h = 0; h < 2; h++)
            c.additive_at(0, h, i, j) = j % 2 == 0 ? -INFINITY : 0.5f;
        if (c.params().tree_mask) c.set_tree_bit(0, i, j, (i + j) % 3 != 0);
      }
    int64_t hidden_somewhere = 0;
    for (int64_t j = 0; j < kHiddenS; j++) {
      int64_t seen_by = 0;
      for (int64_t i = 0; i < kHiddenL; i++) seen_by += hk.hidden(i, j) ? 0 : 1;
      if (seen_by == kHiddenL) continue;
      hidden_somewhere++;
      for (int64_t d = 0; d < 16; d++)
        c.v().Set(0, j, 0, d, seen_by == 0 ? NAN : 1000.0);
    }
    ASSERT_GT(hidden_somewhere, 0);
    if (!Check(c)) continue;
    for (int64_t i = 0; i < kHiddenL; i++)
      for (int64_t h = 0; h < 2; h++)
        ASSERT_FALSE(std::isnan(c.out_at(0, i, h, 0)))
            << "row " << i << " saw a hidden key; cap " << cap;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, SoftcapBeforeMask,
    testing::ValuesIn(ForEveryKernel<HiddenKeyCase>(
        std::vector<HiddenKeyCase>(std::begin(kHiddenKeyCases),
                                   std::end(kHiddenKeyCases)),
        TakesConfigured<HiddenKeyCase>([](AttentionCase &c,
                                          const HiddenKeyCase &) {
          c.q_len(kHiddenL).kv_len(kHiddenS).heads(2, 1).head_dim(16);
        }))),
    KernelParamName<HiddenKeyCase>([](const HiddenKeyCase &hk) {
      return std::string(hk.name);
    }));

// Softcap bounds every score to (-cap, cap): with a tiny cap the weights of
// all visible keys are within exp(2 cap) of each other, so a row's output
// stays inside the range of its visible V values.
using Softcap = KernelOnly;

TEST_P(Softcap, SaturatesLargeScores) {
  AttentionCase c;
  c.q_len(20)
      .kv_len(50)
      .heads(2, 2)
      .head_dim(32)
      .softcap(1e-3f)
      .magnitude(Magnitude::kLarge)
      .seed(4);
  if (!Check(c)) return;
  for (int64_t i = 0; i < 20; i++) {
    double mean = 0.0;
    for (int64_t j = 0; j < 50; j++) mean += c.v().Get(0, j, 0, 0) / 50;
    EXPECT_NEAR(c.out_at(0, i, 0, 0), mean, 1e-3 * 16) << "row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Softcap, testing::ValuesIn(ForEveryKernel()),
                         KernelOnlyName);

} // namespace
} // namespace fctest
