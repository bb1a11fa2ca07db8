// flashcpu_context_options.host_openmp: each call runs as a parallel region
// of a host runtime given by three entry points. A stand-in host made of
// std::threads checks the contract (one region per launch, the asked
// thread count, the caller as thread 0) and that the results are the bytes
// flashcpu's own threads give; this process's OpenMP runtime (its
// GOMP_parallel, which libgomp and LLVM's libomp both export) serves as a
// real host; a host that gives fewer threads, and a struct with an entry
// point missing, are handled.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "attention_case.h"

extern "C" void GOMP_parallel(void (*fn)(void *), void *data,
                              unsigned num_threads, unsigned flags);

namespace fctest {
namespace {

constexpr flashcpu_dtype BF16 = FLASHCPU_DTYPE_BF16;
constexpr int kThreads = 4;

// The stand-in host: a region of std::threads, `give` of them (0: as asked).
thread_local int host_thread = 0;
std::atomic<int> host_team{1};
std::atomic<int> regions{0};
std::atomic<unsigned> give{0};

void StandInParallel(void (*fn)(void *), void *data, unsigned asked,
                     unsigned flags) {
  EXPECT_EQ(flags, 0u);
  regions++;
  const unsigned count = give ? give.load() : asked;
  host_team = static_cast<int>(count);
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < count; i++)
    threads.emplace_back([fn, data, i] {
      host_thread = static_cast<int>(i);
      fn(data);
    });
  host_thread = 0;
  fn(data);
  for (std::thread &thread : threads) thread.join();
}
int StandInThreadNum() { return host_thread; }
int StandInNumThreads() { return host_team; }

const flashcpu_host_openmp kStandIn = {StandInParallel, StandInThreadNum,
                                       StandInNumThreads};
const flashcpu_host_openmp kThisRuntime = {GOMP_parallel, omp_get_thread_num,
                                           omp_get_num_threads};

flashcpu_context *Context(const flashcpu_host_openmp *host) {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = kThreads;
  options.host_openmp = host;
  return ContextWith(options);
}

// A prefill-shaped and a decode-shaped case (split-KV: two launches).
void Configure(AttentionCase &c, bool decode) {
  c.batch(2)
      .q_len(decode ? 1 : 40)
      .kv_len(decode ? 700 : 130)
      .heads(8, 2)
      .head_dim(64)
      .causal()
      .dtypes(BF16, BF16, BF16)
      .seed(decode ? 11 : 12);
}

class HostOpenmp : public testing::TestWithParam<bool> {};

TEST_P(HostOpenmp, StandInHostGivesTheBytesOfOwnThreads) {
  flashcpu_context *own = Context(nullptr);
  flashcpu_context *hosted = Context(&kStandIn);
  ASSERT_TRUE(own && hosted);
  char text[4096];
  flashcpu_context_describe(hosted, text, sizeof text);
  EXPECT_NE(std::string(text).find("threads from the host's OpenMP runtime"),
            std::string::npos)
      << text;
  AttentionCase c;
  Configure(c, GetParam());
  c.Test(own);
  const std::vector<unsigned char> expected = c.out_bytes();
  regions = 0;
  c.Test(hosted);
  EXPECT_GE(regions.load(), 1);
  EXPECT_EQ(c.out_bytes(), expected);
  flashcpu_context_destroy(hosted);
  flashcpu_context_destroy(own);
}

TEST_P(HostOpenmp, ThisProcesssOpenmpRuntimeAsTheHost) {
  flashcpu_context *own = Context(nullptr);
  flashcpu_context *hosted = Context(&kThisRuntime);
  ASSERT_TRUE(own && hosted);
  AttentionCase c;
  Configure(c, GetParam());
  c.Test(own);
  const std::vector<unsigned char> expected = c.out_bytes();
  c.Test(hosted);
  EXPECT_EQ(c.out_bytes(), expected);
  flashcpu_context_destroy(hosted);
  flashcpu_context_destroy(own);
}

// A nested call, say: the host gives one thread; the caller runs every tile.
TEST_P(HostOpenmp, FewerThreadsThanAskedRunOnTheCaller) {
  flashcpu_context *hosted = Context(&kStandIn);
  ASSERT_TRUE(hosted);
  give = 1;
  AttentionCase c;
  Configure(c, GetParam());
  c.Test(hosted);
  give = 0;
  flashcpu_context_destroy(hosted);
}

INSTANTIATE_TEST_SUITE_P(Shapes, HostOpenmp, testing::Bool(),
                         [](const testing::TestParamInfo<bool> &shape) {
                           return std::string(shape.param ? "Decode"
                                                          : "Prefill");
                         });

TEST(HostOpenmpOptions, AMissingEntryPointIsAnError) {
  const flashcpu_host_openmp partial = {StandInParallel, nullptr,
                                        StandInNumThreads};
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.host_openmp = &partial;
  flashcpu_context *ctx = reinterpret_cast<flashcpu_context *>(&options);
  EXPECT_EQ(flashcpu_context_create(&options, &ctx),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("host_openmp"),
            std::string::npos);
}

} // namespace
} // namespace fctest
