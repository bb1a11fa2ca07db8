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

flashcpu_context *Context(int threads, flashcpu_launch_mode launch) {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = threads;
  options.launch = launch;
  flashcpu_context *ctx = nullptr;
  EXPECT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK)
      << flashcpu_last_error(nullptr);
  return ctx;
}

void Configure(AttentionCase &c) {
  c.batch(2).q_len(1).kv_len(700).heads(8, 2).head_dim(64).causal()
      .dtypes(BF16, BF16, BF16).seed(21);
}

std::vector<unsigned char> OutBytes(AttentionCase &c) {
  TestTensor &out = const_cast<TestTensor &>(c.out());
  const flashcpu_tensor view = out.View();
  const size_t bytes = static_cast<size_t>(view.dims[0] * view.dims[1] * view.dims[2] *
                                           view.dims[3]) * flashcpu_dtype_size(view.dtype);
  return std::vector<unsigned char>(out.data(), out.data() + bytes);
}

void Pause(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

struct Mode {
  int threads;
  flashcpu_launch_mode launch;
  const char *name;
};

class ContextWake : public testing::TestWithParam<Mode> {};

TEST_P(ContextWake, CallsAfterAWakeGiveTheSameBytes) {
  flashcpu_context *ctx = Context(GetParam().threads, GetParam().launch);
  ASSERT_TRUE(ctx);
  AttentionCase c;
  Configure(c);
  c.Test(ctx);
  const std::vector<unsigned char> expected = OutBytes(c);
  for (int round = 0; round < 3; round++) {
    Pause(40);  // long enough for a pool's workers to fall asleep
    flashcpu_context_wake(ctx);
    if (round > 0) Pause(round);
    ASSERT_EQ(c.Run(ctx), FLASHCPU_OK) << flashcpu_last_error(ctx);
    EXPECT_EQ(OutBytes(c), expected);
  }
  flashcpu_context_destroy(ctx);
}

TEST_P(ContextWake, WakesWhileCallsRun) {
  flashcpu_context *ctx = Context(GetParam().threads, GetParam().launch);
  ASSERT_TRUE(ctx);
  AttentionCase c;
  Configure(c);
  c.Test(ctx);
  const std::vector<unsigned char> expected = OutBytes(c);
  std::atomic<bool> done{false};
  std::thread waker([&] {
    while (!done) {
      flashcpu_context_wake(ctx);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  for (int round = 0; round < 20; round++) {
    if (round % 5 == 4) Pause(20);
    ASSERT_EQ(c.Run(ctx), FLASHCPU_OK) << flashcpu_last_error(ctx);
    EXPECT_EQ(OutBytes(c), expected);
  }
  done = true;
  waker.join();
  flashcpu_context_destroy(ctx);
}

INSTANTIATE_TEST_SUITE_P(Launches, ContextWake,
                         testing::Values(Mode{4, FLASHCPU_LAUNCH_POOL, "Pool"},
                                         Mode{4, FLASHCPU_LAUNCH_REGION, "Region"},
                                         Mode{1, FLASHCPU_LAUNCH_AUTO, "OneThread"}),
                         [](const testing::TestParamInfo<Mode> &mode) {
                           return std::string(mode.param.name);
                         });

TEST(ContextWakeNull, IsIgnored) { flashcpu_context_wake(nullptr); }

}  // namespace
}  // namespace fctest
