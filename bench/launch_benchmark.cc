// Runtime overheads: an empty launch and a team barrier, for both launch
// modes (a parallel region per launch, the persistent pool), at 1, 2 and all
// threads. Names: launch/empty/<mode>/threads:<n>, barrier/<mode>/threads:<n>.
// Built as flashcpu_runtime_bench (see CMakeLists.txt); the runtime is
// reached through runtime_shim.c because its headers are C only.
#include <benchmark/benchmark.h>

#include <set>
#include <string>
#include <thread>

#include "runtime_shim.h"

namespace {

constexpr int kBarriersPerTile = 1000;

class Runtime {
public:
  Runtime(int threads, bool pool, flashcpu_team_level level)
      : shim_(runtime_shim_create(threads, pool, level)) {}
  ~Runtime() { runtime_shim_destroy(shim_); }
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;
  runtime_shim *get() const { return shim_; }

private:
  runtime_shim *shim_;
};

const char *ModeName(bool pool) { return pool ? "pool" : "region"; }

// One tile per team: what a launch costs when the work is nothing.
void BM_EmptyLaunch(benchmark::State &state, int threads, bool pool) {
  Runtime runtime(threads, pool, FLASHCPU_TEAM_CORE);
  if (!runtime.get()) {
    state.SkipWithError("runtime (or its pool) could not start");
    return;
  }
  for (auto _ : state) {
    if (runtime_shim_launch_empty(runtime.get()) != 0) {
      state.SkipWithError("launch failed");
      break;
    }
  }
  // An inverted rate prints as a time: seconds per launch.
  state.counters["per_launch"] = benchmark::Counter(
      1, benchmark::Counter::kIsIterationInvariantRate |
             benchmark::Counter::kInvert);
}

// All threads in one team, each tile waiting kBarriersPerTile times.
void BM_TeamBarrier(benchmark::State &state, int threads, bool pool) {
  Runtime runtime(threads, pool, FLASHCPU_TEAM_L3);
  if (!runtime.get()) {
    state.SkipWithError("runtime (or its pool) could not start");
    return;
  }
  for (auto _ : state) {
    if (runtime_shim_launch_barriers(runtime.get(), kBarriersPerTile) != 0) {
      state.SkipWithError("launch failed");
      break;
    }
  }
  state.counters["per_barrier"] = benchmark::Counter(
      kBarriersPerTile, benchmark::Counter::kIsIterationInvariantRate |
                            benchmark::Counter::kInvert);
  state.counters["team_size"] = runtime_shim_first_team_size(runtime.get());
}

int RegisterLaunchBenchmarks() {
  int all = static_cast<int>(std::thread::hardware_concurrency());
  std::set<int> counts{1, 2, all > 0 ? all : 1};
  for (bool pool : {false, true})
    for (int threads : counts) {
      if (threads > all) continue;
      if (pool && threads == 1) continue; // no pool of one
      std::string suffix =
          std::string(ModeName(pool)) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("launch/empty/" + suffix).c_str(),
                                   BM_EmptyLaunch, threads, pool)
          ->UseRealTime();
      if (threads > 1)
        benchmark::RegisterBenchmark(("barrier/" + suffix).c_str(),
                                     BM_TeamBarrier, threads, pool)
            ->UseRealTime();
    }
  return 0;
}

} // namespace

// Registered at load time; benchmark::benchmark_main runs them.
static const int launch_benchmarks_registered = RegisterLaunchBenchmarks();
