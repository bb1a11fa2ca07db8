// flashcpu_bench: measures the machine's ceilings at each thread count it
// will use (docs/performance.md: ratios to ceilings measured in the same run),
// prints them, then runs the attention cases.
//
// Without --benchmark_filter it runs the default set (a few minutes on two
// cores); --benchmark_filter=. runs every registered case.
// FLASHCPU_BENCH_CEILINGS=off skips the ceilings (and the ceiling_pct
// counter): for A/B runs that alternate builds case by case.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attention_benchmark.h"
#include "bench_cases.h"
#include "common/ceilings.h"
#include "common/cpu_info.h"
#include "common/quiet_openmp.h"

namespace {

bool HasFlag(int argc, char **argv, const char *flag) {
  const size_t length = std::strlen(flag);
  for (int i = 1; i < argc; i++)
    if (std::strncmp(argv[i], flag, length) == 0 &&
        (argv[i][length] == '\0' || argv[i][length] == '='))
      return true;
  return false;
}

// 1, the powers of two between and every thread a default context uses
// (one per allowed core).
std::vector<int> ThreadCounts() {
  int all = 1;
  flashcpu_context *ctx = nullptr;
  if (flashcpu_context_create(nullptr, &ctx) == FLASHCPU_OK) {
    all = flashcpu_context_num_threads(ctx);
    flashcpu_context_destroy(ctx);
  }
  return BenchThreadCounts(all);
}

void DescribeMachine() {
  toolkit_cpu_info info;
  toolkit_cpu_info_query(&info);
  char features[256], llc[32];
  flashcpu_cpu_features(features, sizeof features);
  toolkit_format_bytes(info.llc_total_bytes, llc, sizeof llc);
  benchmark::AddCustomContext("flashcpu_version", flashcpu_version_string());
  benchmark::AddCustomContext("cpu_model", info.model);
  benchmark::AddCustomContext("isa_features", features);
  benchmark::AddCustomContext("llc_total", llc);
  std::fprintf(stderr, "flashcpu %s on %s (%s)\n", flashcpu_version_string(),
               info.model, features);
}

// False when a measurement failed: every ratio would then divide by zero.
bool MeasureCeilings(const std::vector<int> &thread_counts, bool measure,
                     std::map<int, toolkit_ceilings> *ceilings) {
  for (int threads : thread_counts) {
    toolkit_ceilings measured{};
    measured.threads = threads;
    if (measure) {
      if (toolkit_measure_ceilings(threads, &measured) != 0) {
        std::fprintf(stderr, "flashcpu_bench: cannot allocate the "
                             "read-bandwidth buffer\n");
        return false;
      }
      std::fprintf(stderr, "ceilings   ");
      toolkit_print_ceilings(stderr, &measured);
      const std::string key = "ceiling_threads:" + std::to_string(threads);
      benchmark::AddCustomContext(key + "_read_GBps",
                                  std::to_string(measured.read_gbps));
      benchmark::AddCustomContext(key + "_fma_GFLOPs",
                                  std::to_string(measured.fma_gflops));
      benchmark::AddCustomContext(key + "_isa", measured.fma_isa);
    }
    (*ceilings)[threads] = measured;
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  toolkit_quiet_openmp();
  const bool filter_given = HasFlag(argc, argv, "--benchmark_filter") ||
                            std::getenv("BENCHMARK_FILTER") != nullptr;
  const bool list_only = HasFlag(argc, argv, "--benchmark_list_tests");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const std::vector<int> thread_counts = ThreadCounts();
  const std::vector<BenchCase> cases = AllBenchCases(thread_counts);
  if (!filter_given) {
    benchmark::SetBenchmarkFilter(DefaultSetFilter(cases));
    std::fprintf(stderr,
                 "no --benchmark_filter: running the default set "
                 "(--benchmark_filter=. runs all %zu cases)\n",
                 cases.size());
  }
  DescribeMachine();
  // Ceilings go to stderr and the JSON context, so that stdout stays valid
  // JSON under --benchmark_format=json.
  std::map<int, toolkit_ceilings> ceilings;
  const char *ceilings_setting = std::getenv("FLASHCPU_BENCH_CEILINGS");
  const bool skip_ceilings =
      ceilings_setting && std::strcmp(ceilings_setting, "off") == 0;
  if (!MeasureCeilings(thread_counts, !list_only && !skip_ceilings, &ceilings))
    return 1;
  RegisterAttentionBenchmarks(cases, ceilings);
  benchmark::RunSpecifiedBenchmarks();
  ReleaseAttentionBenchmarks();
  benchmark::Shutdown();
  return 0;
}
