// flashcpu_context_wake: a call after it (the workers asleep before, or
// woken and waiting) gives the bytes of a call without it (which passed the
// oracle), in each launch mode and with one thread; it may run while calls
// run; NULL is ignored.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16;

void Pause(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

struct Mode {
  int threads;
  const char *settings; // the launch setting; nullptr: the default
  const char *name;
};

// A context of the mode, and a decode case whose first call passed the
// oracle: its bytes are what every later call must give.
class ContextWake : public testing::TestWithParam<Mode> {
protected:
  void SetUp() override {
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.num_threads = GetParam().threads;
    options.settings = GetParam().settings;
    ctx_ = ContextWith(options);
    ASSERT_TRUE(ctx_);
    case_.batch(2)
        .q_len(1)
        .kv_len(700)
        .heads(8, 2)
        .head_dim(64)
        .causal()
        .dtypes(BF16, BF16, BF16)
        .seed(21);
    case_.Test(ctx_);
    expected_ = case_.out_bytes();
  }
  void TearDown() override { flashcpu_context_destroy(ctx_); }
  void CallGivesTheSameBytes() {
    ASSERT_EQ(case_.Run(ctx_), FLASHCPU_OK) << flashcpu_last_error(ctx_);
    EXPECT_EQ(case_.out_bytes(), expected_);
  }

  flashcpu_context *ctx_ = nullptr;
  AttentionCase case_;
  std::vector<unsigned char> expected_;
};

TEST_P(ContextWake, CallsAfterAWakeGiveTheSameBytes) {
  for (int round = 0; round < 3; round++) {
    Pause(40); // long enough for a pool's workers to fall asleep
    flashcpu_context_wake(ctx_);
    if (round > 0) Pause(round);
    CallGivesTheSameBytes();
  }
}

TEST_P(ContextWake, WakesWhileCallsRun) {
  std::atomic<bool> done{false};
  std::thread waker([&] {
    while (!done) {
      flashcpu_context_wake(ctx_);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  for (int round = 0; round < 20; round++) {
    if (round % 5 == 4) Pause(20);
    CallGivesTheSameBytes();
  }
  done = true;
  waker.join();
}

INSTANTIATE_TEST_SUITE_P(Launches, ContextWake,
                         testing::Values(Mode{4, "launch = pool", "Pool"},
                                         Mode{4, "launch = region", "Region"},
                                         Mode{1, nullptr, "OneThread"}),
                         [](const testing::TestParamInfo<Mode> &mode) {
                           return std::string(mode.param.name);
                         });

TEST(ContextWakeNull, IsIgnored) { flashcpu_context_wake(nullptr); }

} // namespace
} // namespace fctest
