// The benchmark cases: model presets x phase x dtype x shape x threads,
// named <phase>/<preset>/<dtype>/L:<rows>/S:<kv>/threads:<n>.
#ifndef FLASHCPU_BENCH_BENCH_CASES_H
#define FLASHCPU_BENCH_BENCH_CASES_H

#include <cstdint>
#include <string>
#include <vector>

#include "common/presets.h"
#include "common/workload.h"
#include "flashcpu/flashcpu.h"

struct BenchCase {
  toolkit_phase phase;
  const toolkit_preset *preset;
  flashcpu_dtype dtype;
  int64_t rows;
  int64_t kv;
  int threads;
  bool in_default_set; // runs when no --benchmark_filter is given
};

std::string BenchCaseName(const BenchCase &bench_case);

// Every case, ordered so that cases sharing a workload (they differ only in
// threads) are adjacent, which lets the runner build each workload once.
std::vector<BenchCase> AllBenchCases(const std::vector<int> &thread_counts);

// A --benchmark_filter regex that selects exactly the default set.
std::string DefaultSetFilter(const std::vector<BenchCase> &cases);

#endif
