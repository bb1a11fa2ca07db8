// The launch API: every tile exactly once, whole teams per tile, the team
// barrier publishes writes, heaviest-first order, static schedule.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

extern "C" {
#include "runtime/runtime.h"
}

namespace {

struct Runtime {
  fc_runtime runtime{};
  bool ok = false;
  Runtime(int threads, int max_team, flashcpu_team_level level,
          fc_launch_mode mode = FC_LAUNCH_REGION) {
    fc_runtime_options options{nullptr,  threads, level,
                               max_team, mode,    nullptr};
    char error[256] = "";
    ok = fc_runtime_create(&runtime, &options, error, sizeof error) == 0;
    EXPECT_TRUE(ok) << error;
  }
  ~Runtime() {
    if (ok) fc_runtime_destroy(&runtime);
  }
};

struct Visits {
  std::vector<std::atomic<int>> by_rank0, by_all;
  std::vector<std::atomic<int>> team_size;
  explicit Visits(int64_t tiles)
      : by_rank0(tiles), by_all(tiles), team_size(tiles) {}
};

void CountVisit(void *args, int64_t tile, const fc_team_view *team) {
  auto *visits = static_cast<Visits *>(args);
  EXPECT_GE(team->rank, 0);
  EXPECT_LT(team->rank, team->size);
  EXPECT_LT(team->team, team->team_count);
  if (team->rank == 0) {
    visits->by_rank0[tile]++;
    visits->team_size[tile] = team->size;
  }
  visits->by_all[tile]++;
}

int Nproc() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

class LaunchCoverage : public ::testing::TestWithParam<
                           std::tuple<int, int, bool, fc_launch_mode>> {};

TEST_P(LaunchCoverage, EveryTileOnceByAWholeTeam) {
  auto [threads, max_team, static_schedule, mode] = GetParam();
  if (threads == 0) threads = Nproc();
  Runtime r(threads, max_team, FLASHCPU_TEAM_L3, mode);
  ASSERT_TRUE(r.ok);
  // The pool starts wherever OpenMP gives the threads; 1 thread needs none.
  if (threads > 1) {
    EXPECT_EQ(r.runtime.mode, mode);
  }
  for (int64_t tiles : {1, 5, 64, 1001}) {
    Visits visits(tiles);
    fc_launch launch{CountVisit, &visits, tiles, static_schedule, nullptr};
    ASSERT_EQ(fc_runtime_launch(&r.runtime, &launch), 0);
    for (int64_t t = 0; t < tiles; t++) {
      ASSERT_EQ(visits.by_rank0[t].load(), 1) << "tile " << t;
      ASSERT_EQ(visits.by_all[t].load(), visits.team_size[t].load())
          << "tile " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ThreadsAndTeams, LaunchCoverage,
    ::testing::Combine(::testing::Values(1, 2, 3, 7, 0), // 0: nproc
                       ::testing::Values(1, 2, 3, 0),    // 0: no limit
                       ::testing::Bool(),
                       ::testing::Values(FC_LAUNCH_REGION, FC_LAUNCH_POOL)));

// Each rank writes its slot, waits, then checks every other rank's slot:
// a barrier that does not wait or does not publish fails this.
void ExchangeThroughScratch(void *args, int64_t tile,
                            const fc_team_view *team) {
  auto *failures = static_cast<std::atomic<int> *>(args);
  auto *slots = static_cast<volatile int64_t *>(team->scratch);
  fc_barrier_wait(team->barrier);
  slots[team->rank] = tile * 1000 + team->rank;
  fc_barrier_wait(team->barrier);
  for (int r = 0; r < team->size; r++)
    if (slots[r] != tile * 1000 + r) (*failures)++;
}

TEST(TeamBarrier, PublishesWritesWithinTheTeam) {
  for (int threads : {2, 3, 7}) {
    Runtime r(threads, 0, FLASHCPU_TEAM_L3, FC_LAUNCH_POOL);
    ASSERT_TRUE(r.ok);
    std::atomic<int> failures{0};
    fc_launch launch{ExchangeThroughScratch, &failures, 500, false, nullptr};
    ASSERT_EQ(fc_runtime_launch(&r.runtime, &launch), 0);
    EXPECT_EQ(failures.load(), 0) << threads << " threads";
  }
}

struct Order {
  std::vector<int64_t> seen;
};
int64_t WeightOfTile(const void *, int64_t tile) { return (tile * 37) % 11; }
void RecordOrder(void *args, int64_t tile, const fc_team_view *) {
  static_cast<Order *>(args)->seen.push_back(tile);
}

TEST(Launch, WeightsGiveHeaviestFirst) {
  Runtime r(1, 0, FLASHCPU_TEAM_CORE);
  ASSERT_TRUE(r.ok);
  Order order;
  fc_launch launch{RecordOrder, &order, 100, false, WeightOfTile};
  ASSERT_EQ(fc_runtime_launch(&r.runtime, &launch), 0);
  ASSERT_EQ(order.seen.size(), 100u);
  for (size_t i = 1; i < order.seen.size(); i++) {
    int64_t before = WeightOfTile(nullptr, order.seen[i - 1]);
    int64_t now = WeightOfTile(nullptr, order.seen[i]);
    ASSERT_GE(before, now);
    if (before == now) {
      ASSERT_LT(order.seen[i - 1], order.seen[i]);
    }
  }
}

TEST(Launch, StaticScheduleGivesTeamsStridedTiles) {
  Runtime r(3, 1, FLASHCPU_TEAM_CORE);
  ASSERT_TRUE(r.ok);
  std::vector<std::atomic<int>> team_of(30);
  auto record = [](void *args, int64_t tile, const fc_team_view *team) {
    (*static_cast<std::vector<std::atomic<int>> *>(args))[tile] = team->team;
  };
  fc_launch launch{record, &team_of, 30, true, nullptr};
  ASSERT_EQ(fc_runtime_launch(&r.runtime, &launch), 0);
  for (int t = 0; t < 30; t++)
    EXPECT_EQ(team_of[t].load(), t % r.runtime.plan.team_count);
}

TEST(Launch, PoolSurvivesManyLaunches) {
  Runtime r(3, 0, FLASHCPU_TEAM_CORE, FC_LAUNCH_POOL);
  ASSERT_TRUE(r.ok);
  for (int round = 0; round < 200; round++) {
    Visits visits(9);
    fc_launch launch{CountVisit, &visits, 9, round % 2 == 0, nullptr};
    ASSERT_EQ(fc_runtime_launch(&r.runtime, &launch), 0);
    for (int t = 0; t < 9; t++) ASSERT_EQ(visits.by_rank0[t].load(), 1);
  }
}

TEST(Launch, PoolLaunchesAfterIdleTimeRunEveryTileOnce) {
  // Teams of one thread on dynamic tiles: a launch does not wait for
  // workers still waking, and one that wakes after the launch returned
  // must not touch its (by then destroyed) tiles or arguments. Pauses of
  // 40 ms let the workers fall asleep between some of the launches.
  Runtime r(4, 1, FLASHCPU_TEAM_L3, FC_LAUNCH_POOL);
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.runtime.plan.team_count, r.runtime.plan.thread_count);
  const int pauses_ms[] = {0, 40, 0, 1, 40, 0, 0, 40, 2, 0, 40, 0};
  for (int round = 0; round < 60; round++) {
    const int pause = pauses_ms[round % 12];
    if (pause > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(pause));
    auto visits = std::make_unique<Visits>(64);
    // Every third launch waits for all workers (a static schedule).
    fc_launch launch{CountVisit, visits.get(), 64, round % 3 == 2, nullptr};
    ASSERT_EQ(fc_runtime_launch(&r.runtime, &launch), 0);
    for (int t = 0; t < 64; t++) ASSERT_EQ(visits->by_all[t].load(), 1);
  }
}

TEST(Launch, NestedInsideAParallelRegionStillRunsEveryTile) {
  // OpenMP gives a nested region one thread: the launch must still finish.
  Runtime r(2, 0, FLASHCPU_TEAM_L3);
  ASSERT_TRUE(r.ok);
  Visits visits(50);
  std::atomic<int> launches{0};
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    {
      fc_launch launch{CountVisit, &visits, 50, false, nullptr};
      if (fc_runtime_launch(&r.runtime, &launch) == 0) launches++;
    }
  }
  ASSERT_EQ(launches.load(), 1);
  for (int t = 0; t < 50; t++) EXPECT_EQ(visits.by_rank0[t].load(), 1);
}

TEST(Launch, ScratchGrowsOnlyWhenAsked) {
  Runtime r(2, 0, FLASHCPU_TEAM_CORE);
  ASSERT_TRUE(r.ok);
  void *before = r.runtime.teams[0].scratch;
  size_t bytes = r.runtime.teams[0].scratch_bytes;
  ASSERT_EQ(fc_runtime_reserve_scratch(&r.runtime, bytes), 0);
  EXPECT_EQ(r.runtime.teams[0].scratch, before); // no reallocation
  ASSERT_EQ(fc_runtime_reserve_scratch(&r.runtime, bytes * 2), 0);
  EXPECT_GE(r.runtime.teams[0].scratch_bytes, bytes * 2);
}

} // namespace
