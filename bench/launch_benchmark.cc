// Runtime overheads: an empty launch and a team barrier, for both launch
// modes (a parallel region per launch, the persistent pool), at 1, 2 and all
// threads. Names: launch/empty/<mode>/threads:<n>, barrier/<mode>/threads:<n>.
#include <benchmark/benchmark.h>

#include <set>
#include <string>
#include <thread>

extern "C" {
#include "runtime/runtime.h"
}

namespace {

constexpr int kBarriersPerTile = 1000;

struct RuntimeFixture {
  fc_runtime runtime{};
  bool ok = false;
  RuntimeFixture(int threads, fc_launch_mode mode, flashcpu_team_level level) {
    fc_runtime_options options{nullptr, threads, level, 0, mode, nullptr};
    char error[256];
    ok = fc_runtime_create(&runtime, &options, error, sizeof error) == 0 &&
         runtime.mode == mode;
  }
  ~RuntimeFixture() {
    if (ok) fc_runtime_destroy(&runtime);
  }
};

void EmptyTile(void *, int64_t, const fc_team_view *) {}

void BarrierTile(void *, int64_t, const fc_team_view *team) {
  for (int i = 0; i < kBarriersPerTile; i++) fc_barrier_wait(team->barrier);
}

const char *ModeName(fc_launch_mode mode) {
  return mode == FC_LAUNCH_POOL ? "pool" : "region";
}

// One tile per team: what a launch costs when the work is nothing.
void BM_EmptyLaunch(benchmark::State &state, int threads, fc_launch_mode mode) {
  RuntimeFixture fixture(threads, mode, FLASHCPU_TEAM_CORE);
  if (!fixture.ok) {
    state.SkipWithError("runtime (or its pool) could not start");
    return;
  }
  fc_launch launch{EmptyTile, nullptr, fixture.runtime.plan.team_count, true,
                   nullptr};
  for (auto _ : state) fc_runtime_launch(&fixture.runtime, &launch);
  // An inverted rate prints as a time: seconds per launch.
  state.counters["per_launch"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate |
                                benchmark::Counter::kInvert);
}

// All threads in one team, each tile waiting kBarriersPerTile times.
void BM_TeamBarrier(benchmark::State &state, int threads, fc_launch_mode mode) {
  RuntimeFixture fixture(threads, mode, FLASHCPU_TEAM_L3);
  if (!fixture.ok) {
    state.SkipWithError("runtime (or its pool) could not start");
    return;
  }
  fc_launch launch{BarrierTile, nullptr, fixture.runtime.plan.team_count, true,
                   nullptr};
  for (auto _ : state) fc_runtime_launch(&fixture.runtime, &launch);
  state.counters["per_barrier"] = benchmark::Counter(
      kBarriersPerTile, benchmark::Counter::kIsIterationInvariantRate |
                            benchmark::Counter::kInvert);
  state.counters["team_size"] = fixture.runtime.plan.teams[0].size;
}

int RegisterLaunchBenchmarks() {
  int all = static_cast<int>(std::thread::hardware_concurrency());
  std::set<int> counts{1, 2, all > 0 ? all : 1};
  for (fc_launch_mode mode : {FC_LAUNCH_REGION, FC_LAUNCH_POOL})
    for (int threads : counts) {
      if (threads > all) continue;
      if (mode == FC_LAUNCH_POOL && threads == 1) continue; // no pool of one
      std::string suffix =
          std::string(ModeName(mode)) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("launch/empty/" + suffix).c_str(),
                                   BM_EmptyLaunch, threads, mode)
          ->UseRealTime();
      if (threads > 1)
        benchmark::RegisterBenchmark(("barrier/" + suffix).c_str(),
                                     BM_TeamBarrier, threads, mode)
            ->UseRealTime();
    }
  return 0;
}

} // namespace

// Registered at load time so the main of flashcpu_bench picks them up.
static const int launch_benchmarks_registered = RegisterLaunchBenchmarks();
