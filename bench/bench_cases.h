// The benchmark cases: model presets x phase x dtype x shape x batch x mask
// x threads, named
//   <phase>/<preset>/<dtype>/L:<rows>/S:<kv>/B:<batch>/mask:<mask>/threads:<n>
// (decode on a quantized KV cache: <dtype>/kv:<kv dtype>/L:...)
// with the kernel chosen per call; paged K/V (flashcpu_attention_paged)
// add /page:<tokens> before threads, and the serving step (an engine's
// ragged step of decode requests and a prefill chunk) names the chunk's
// cached prefix:
//   serve/<preset>/<dtype>[/kv:<kv dtype>]/L:<chunk rows>/prefix:<keys>/
//       S:<longest kv>/B:<decode requests>/mask:causal[/page:<tokens>]/
//       threads:<n>
// A batch whose kv lengths spread from a given shortest names it after S:
//   .../S:<longest>/from:<shortest>/B:...
// One case set per kernel of the registry that this CPU runs
// (flashcpu_kernel_info_get), forced by name:
//   kernel:<name>/<phase>/<preset>/...
// (NOTES.md lists them and the filters that pick them).
#ifndef FLASHCPU_BENCH_BENCH_CASES_H
#define FLASHCPU_BENCH_BENCH_CASES_H

#include <cstdint>
#include <string>
#include <vector>

#include "common/presets.h"
#include "common/workload.h"
#include "flashcpu/flashcpu.h"

// Which masks a case applies.
enum class BenchMask {
  kCausal, // the preset's masks: causal, plus its sliding window if any
  kNone,   // none: every query row sees every key (encoder-style prefill)
  kTree,   // speculative verify: causal and the draft tree
};

struct BenchCase {
  toolkit_phase phase;
  const toolkit_preset *preset;
  flashcpu_dtype dtype;
  int64_t rows;
  int64_t kv;    // S: the longest kv length of the batch
  int64_t batch; // > 1: mixed kv lengths, kv / 8 to kv (serve: decode
                 // requests, kv 1K to kv)
  BenchMask mask;
  int threads;
  bool in_default_set;   // runs when no --benchmark_filter is given
  std::string kernel;    // forced kernel; empty: the context chooses
  int64_t page_size = 0; // 0: contiguous K/V; else pages of this many tokens
  int64_t prefix = 0;    // serve: keys cached before the chunk
  // K/V stored as this dtype instead (a quantized cache: i8, u8 with
  // per-token scales, f8 with a per-tensor scale, q8_0); named /kv:<dtype>
  // after the dtype. FLASHCPU_DTYPE_F32 with kv_quantized false: dtype.
  bool kv_quantized = false;
  flashcpu_dtype kv_dtype = FLASHCPU_DTYPE_F32;
  // > 0: the batch's kv lengths spread evenly from this to kv (decode: in
  // place of kv / 8; serve: of 1K), named /from:<shortest> after S.
  int64_t shortest = 0;
};

std::string BenchCaseName(const BenchCase &bench_case);

// The workload a case times (preset masks or none, batch, mixed lengths).
toolkit_workload_spec BenchCaseSpec(const BenchCase &bench_case);

// 1, every power of two below all_threads, and all_threads.
std::vector<int> BenchThreadCounts(int all_threads);

// Every case, ordered so that cases sharing a workload (they differ only in
// threads) are adjacent, which lets the runner build each workload once.
// Only 1 and all threads (the first and last count) are in the default set.
std::vector<BenchCase> AllBenchCases(const std::vector<int> &thread_counts);

// A --benchmark_filter regex that selects exactly the default set.
std::string DefaultSetFilter(const std::vector<BenchCase> &cases);

#endif
