// The timed loop. One call per iteration (flashcpu_attention; paged cases
// flashcpu_attention_paged with a plan made once per context and workload;
// the serving step on contiguous K/V its two flashcpu_attention calls);
// decode, verify and serve calls rotate over the workload's layer-sized KV
// caches, one layer per iteration, so each call reads its K and V from
// memory as a real decode step does. Timing is wall clock (UseRealTime):
// the calling thread's CPU time says nothing about an OpenMP call.
#include "attention_benchmark.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "common/cpu_info.h"
#include "common/timer.h"

namespace {

// The last workload built. Cases that differ only in thread count are
// registered next to each other and share it; keeping only one bounds
// memory (a decode workload may take a quarter of RAM).
class WorkloadCache {
public:
  const toolkit_workload *Get(const toolkit_workload_spec &spec,
                              const std::string &name, std::string *error) {
    if (valid_ && SameSpec(spec, spec_)) return &workload_;
    Release();
    char message[256] = "";
    if (toolkit_workload_build(&spec, &workload_, message, sizeof message)) {
      *error = message;
      return nullptr;
    }
    valid_ = true;
    spec_ = spec;
    if (workload_.rotation_under_cache) WarnUnderCache(name);
    return &workload_;
  }
  // The workload's plan on ctx (nullptr for contiguous K/V), made once: an
  // engine makes one per step and uses it for every layer.
  bool Plan(flashcpu_context *ctx, const flashcpu_plan **plan,
            std::string *error) {
    auto found = plans_.find(ctx);
    if (found == plans_.end()) {
      flashcpu_plan *made = nullptr;
      flashcpu_status status = toolkit_workload_plan(ctx, &workload_, &made);
      if (status != FLASHCPU_OK) {
        *error = std::string("flashcpu_plan_create: ") +
                 flashcpu_status_name(status) + ": " + flashcpu_last_error(ctx);
        return false;
      }
      found = plans_.emplace(ctx, made).first;
    }
    *plan = found->second;
    return true;
  }
  void Release() {
    for (auto &entry : plans_) flashcpu_plan_destroy(entry.second);
    plans_.clear();
    if (valid_) toolkit_workload_free(&workload_);
    valid_ = false;
  }

private:
  static bool SameSpec(const toolkit_workload_spec &a,
                       const toolkit_workload_spec &b) {
    return a.preset == b.preset && a.phase == b.phase && a.batch == b.batch &&
           a.q_rows == b.q_rows && a.kv_rows == b.kv_rows &&
           a.q_dtype == b.q_dtype && a.kv_dtype == b.kv_dtype &&
           a.out_dtype == b.out_dtype && a.causal == b.causal &&
           a.window_left == b.window_left && a.window_right == b.window_right &&
           a.softcap == b.softcap && a.tree_mask == b.tree_mask &&
           a.mixed_kv_lengths == b.mixed_kv_lengths && a.layers == b.layers &&
           a.seed == b.seed && a.page_size == b.page_size &&
           a.prefix_rows == b.prefix_rows && a.shortest_kv == b.shortest_kv;
  }
  // The rotated set should exceed the last-level cache 4x; the
  // memory cap (a quarter of RAM) may not allow it.
  void WarnUnderCache(const std::string &name) const {
    toolkit_cpu_info info;
    toolkit_cpu_info_query(&info);
    char rotated[32], llc[32];
    toolkit_format_bytes(static_cast<uint64_t>(workload_.layer_count) *
                             workload_.layer_bytes,
                         rotated, sizeof rotated);
    toolkit_format_bytes(info.llc_total_bytes, llc, sizeof llc);
    std::fprintf(stderr,
                 "flashcpu_bench: warning: %s: the memory cap (a quarter "
                 "of RAM) leaves %d KV layers (%s) rotated, under %dx the "
                 "last-level cache (%s): some reads may come from cache\n",
                 name.c_str(), workload_.layer_count, rotated,
                 static_cast<int>(TOOLKIT_CACHE_MULTIPLE), llc);
  }
  bool valid_ = false;
  toolkit_workload_spec spec_{}; // as asked for (the build may adjust it)
  toolkit_workload workload_{};
  std::map<flashcpu_context *, flashcpu_plan *> plans_;
};

WorkloadCache workload_cache;
// By (num_threads, forced kernel or "").
std::map<std::pair<int, std::string>, flashcpu_context *> contexts;
std::string warmed_case; // the case warmed up last
// The next KV layer to read. It carries over between the runs that
// google-benchmark makes of one case (while sizing the iteration count), so
// a run never starts on a layer the previous run has just left in cache.
int next_layer = 0;

flashcpu_context *ContextFor(int threads, const std::string &kernel,
                             std::string *error) {
  auto found = contexts.find({threads, kernel});
  if (found != contexts.end()) return found->second;
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = threads;
  const std::string settings = "kernel = " + kernel; // read by the create
  if (!kernel.empty()) options.settings = settings.c_str();
  flashcpu_context *ctx = nullptr;
  flashcpu_status status = flashcpu_context_create(&options, &ctx);
  if (status != FLASHCPU_OK) {
    *error = std::string("flashcpu_context_create: ") +
             flashcpu_status_name(status) + ": " + flashcpu_last_error(nullptr);
    return nullptr;
  }
  contexts[{threads, kernel}] = ctx;
  return ctx;
}

void RunCase(benchmark::State &state, const BenchCase &bench_case,
             const toolkit_ceilings &ceilings) {
  std::string error;
  flashcpu_context *ctx =
      ContextFor(bench_case.threads, bench_case.kernel, &error);
  const toolkit_workload_spec spec = BenchCaseSpec(bench_case);
  const std::string name = BenchCaseName(bench_case);
  const toolkit_workload *workload =
      ctx ? workload_cache.Get(spec, name, &error) : nullptr;
  const flashcpu_plan *plan = nullptr;
  if (!workload || !workload_cache.Plan(ctx, &plan, &error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  // google-benchmark calls this several times per case while it sizes the
  // iteration count; one warm-up call per case is enough.
  if (warmed_case != name) {
    if (toolkit_workload_call(ctx, workload, plan, next_layer++) !=
        FLASHCPU_OK) {
      state.SkipWithError(flashcpu_last_error(ctx));
      return;
    }
    warmed_case = name;
  }
  // Wall time of the whole loop, measured here too so that the counters
  // are plain numbers (google-benchmark prints its rate counters as "/s").
  const double start = toolkit_now_seconds();
  for (auto _ : state) {
    if (toolkit_workload_call(ctx, workload, plan, next_layer++) !=
        FLASHCPU_OK) {
      state.SkipWithError(flashcpu_last_error(ctx));
      break;
    }
  }
  const double seconds = toolkit_now_seconds() - start;
  next_layer %= workload->layer_count;
  if (state.error_occurred() || seconds <= 0.0) return;

  const double calls = static_cast<double>(state.iterations());
  const double gbps = workload->bytes_per_call * calls / seconds * 1e-9;
  const double gflops = workload->flops_per_call * calls / seconds * 1e-9;
  state.counters["GBps"] = gbps;
  state.counters["GFLOPs"] = gflops;
  if (ceilings.read_gbps > 0.0 && ceilings.fma_gflops > 0.0)
    state.counters["ceiling_pct"] =
        toolkit_ceiling_percent(workload, &ceilings, seconds / calls,
                                flashcpu_context_last_kernels(ctx));
  state.SetBytesProcessed(
      static_cast<int64_t>(workload->bytes_per_call * calls));
  // Items are query rows (tokens) of one layer.
  state.SetItemsProcessed(
      static_cast<int64_t>(calls * static_cast<double>(workload->num_tokens)));
  state.SetLabel(std::string("layers:") +
                 std::to_string(workload->layer_count));
}

} // namespace

void RegisterAttentionBenchmarks(
    const std::vector<BenchCase> &cases,
    const std::map<int, toolkit_ceilings> &ceilings_by_threads) {
  for (const BenchCase &bench_case : cases) {
    const toolkit_ceilings ceilings =
        ceilings_by_threads.at(bench_case.threads);
    benchmark::RegisterBenchmark(
        BenchCaseName(bench_case).c_str(),
        [bench_case, ceilings](benchmark::State &state) {
          RunCase(state, bench_case, ceilings);
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

void ReleaseAttentionBenchmarks() {
  workload_cache.Release();
  for (auto &entry : contexts) flashcpu_context_destroy(entry.second);
  contexts.clear();
}
