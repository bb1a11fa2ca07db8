// The unbound caller and the workers never share a core in a launch: where
// the caller runs on a worker's PU, the two swap places (runtime.c,
// place_caller), and swap back once the caller is on its own PU again.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

extern "C" {
#include "runtime/runtime.h"
}

namespace {

#if defined(__linux__)
// Pins the calling thread to one PU for the test's life, then restores it.
class PinnedCaller {
public:
  explicit PinnedCaller(int pu) {
    saved_ok_ =
        pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(pu, &one);
    ok_ = saved_ok_ &&
          pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0 &&
          sched_getcpu() == pu;
  }
  ~PinnedCaller() {
    if (saved_ok_)
      pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  bool ok() const { return ok_; }

private:
  cpu_set_t saved_;
  bool saved_ok_ = false, ok_ = false;
};

// The PU each team's thread ran its tile on (one tile per team).
std::vector<int> PusByTeam(fc_runtime *runtime) {
  std::vector<std::atomic<int>> pus(
      static_cast<size_t>(runtime->plan.team_count));
  auto record = [](void *args, int64_t tile, const fc_team_view *) {
    (*static_cast<std::vector<std::atomic<int>> *>(
        args))[static_cast<size_t>(tile)] = sched_getcpu();
  };
  fc_launch launch{record, &pus, runtime->plan.team_count, true, nullptr};
  EXPECT_EQ(fc_runtime_launch(runtime, &launch), 0);
  std::vector<int> out;
  for (auto &pu : pus) out.push_back(pu.load());
  return out;
}
#endif

class CallerPlace : public ::testing::TestWithParam<fc_launch_mode> {};

TEST_P(CallerPlace, CallerOnAWorkersPuSwapsPlacesWithIt) {
#if !defined(__linux__)
  GTEST_SKIP() << "sched_getcpu is Linux's";
#else
  fc_runtime runtime{};
  fc_runtime_options options{nullptr, 2,          FLASHCPU_TEAM_CORE,
                             1,       GetParam(), nullptr};
  char error[256] = "";
  ASSERT_EQ(fc_runtime_create(&runtime, &options, error, sizeof error), 0)
      << error;
  const fc_team_plan &plan = runtime.plan;
  const int planned_caller = plan.threads[0].pu_os_index;
  const int worker = plan.threads[1].pu_os_index;
  if (!plan.pinned || plan.thread_count != 2 || plan.team_count != 2 ||
      planned_caller == worker) {
    fc_runtime_destroy(&runtime);
    GTEST_SKIP() << "needs two cores the runtime can pin to";
  }
  {
    PinnedCaller caller(worker);
    if (!caller.ok()) {
      fc_runtime_destroy(&runtime);
      GTEST_SKIP() << "cannot pin the test thread";
    }
    // The caller takes the worker's place (team 1), the worker the caller's.
    const std::vector<int> swapped = PusByTeam(&runtime);
    EXPECT_EQ(swapped[0], planned_caller);
    EXPECT_EQ(swapped[1], worker);
  }
  {
    PinnedCaller caller(planned_caller);
    ASSERT_TRUE(caller.ok());
    // Back on its own PU: every thread in its planned place.
    const std::vector<int> planned = PusByTeam(&runtime);
    EXPECT_EQ(planned[0], planned_caller);
    EXPECT_EQ(planned[1], worker);
  }
  fc_runtime_destroy(&runtime);
#endif
}

INSTANTIATE_TEST_SUITE_P(Modes, CallerPlace,
                         ::testing::Values(FC_LAUNCH_POOL, FC_LAUNCH_REGION));

} // namespace
