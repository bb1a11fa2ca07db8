// Registers the attention cases with google-benchmark.
#ifndef FLASHCPU_BENCH_ATTENTION_BENCHMARK_H
#define FLASHCPU_BENCH_ATTENTION_BENCHMARK_H

#include <map>
#include <vector>

#include "bench_cases.h"
#include "common/ceilings.h"

// One benchmark per case; each reports GB/s, GFLOP/s and the percent of
// the ceiling (measured at its thread count) that binds its phase.
void RegisterAttentionBenchmarks(
    const std::vector<BenchCase> &cases,
    const std::map<int, toolkit_ceilings> &ceilings_by_threads);

// Frees the cached workload and contexts (call after the run).
void ReleaseAttentionBenchmarks();

#endif
