// Which shapes are measured. The full set (docs/performance.md):
// decode KV 1K to 128K at batch 1 and batch 8 (mixed lengths), speculative
// verify of 4 and 16 draft rows, prefill L = S = 512 to 16K causal and not,
// chunked prefill of 512 rows onto 8K; threads 1, the powers of two between
// and all. Paged K/V: llama3-8b bf16 decode at kv 4K, 16K and 32K in pages
// of 1 and 16 tokens (threads 1 and all), next to the same contiguous
// cases; a batch of 64 short decode requests (kv 256 to 4K), paged (16)
// and contiguous; and the serving step: 32 decode requests (kv 1K to 32K)
// and a chunk of 512 rows onto 4096 cached keys, paged (16 and 1) and
// contiguous, and paged (16) on each quantized KV cache. The default set
// (no --benchmark_filter) stays runnable in a few minutes on two cores
// with the portable kernels.
#include "bench_cases.h"

#include <cstring>
#include <set>

namespace {

const flashcpu_dtype kAllDtypes[] = {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16,
                                     FLASHCPU_DTYPE_BF16};
const int64_t kDecodeKv[] = {1024, 4096, 16384, 32768, 131072};
const int64_t kDecodeBatch[] = {1, 8};
const int64_t kVerifyRows[] = {4, 16};
const int64_t kVerifyKv = 8192;
const int64_t kPrefillLength[] = {512, 2048, 4096, 16384};
const int64_t kChunkRows = 512, kChunkKv = 8192;

// Paged decode: llama3-8b bf16, batch 1, at these kv lengths and page sizes.
const char *const kPagedPreset = "llama3-8b";
const std::set<int64_t> kPagedDecodeKv = {4096, 16384, 32768};
const int64_t kPageSizes[] = {1, 16};
// In the default set: page 16 at kv 16K, all threads (next to the
// contiguous kv 16K case of the default set).
const int64_t kDefaultPagedKv = 16384, kDefaultPageSize = 16;

// The serving step (llama3-8b bf16), paged and contiguous.
struct ServeShape {
  int64_t chunk_rows, prefix, longest_kv, decode_requests;
  bool in_default_set; // paged, all threads only
};
const ServeShape kServeShapes[] = {
    {512, 4096, 32768, 32, false},
    {128, 1024, 4096, 8, true}, // small: the default set's
};
const int64_t kServePageSize = 16;
// The full-size step also on pages of 1 (a token pool) and, on pages of
// 16, on each quantized KV cache (threads 1 and all).
const int64_t kServeTokenPage = 1;
const flashcpu_dtype kQuantizedKv[] = {
    FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_U8, FLASHCPU_DTYPE_F8_E4M3,
    FLASHCPU_DTYPE_F8_E5M2, FLASHCPU_DTYPE_Q8_0};

// Many short decode requests (llama3-8b bf16): kv lengths spread from
// kShortestKv to kShortBatchKv, contiguous and paged (16).
const int64_t kShortBatch = 64, kShortestKv = 256, kShortBatchKv = 4096;

const std::set<std::string> kDefaultDecodePresets = {"llama3-8b", "qwen2.5-7b",
                                                     "gemma2-9b"};
const std::set<int64_t> kDefaultDecodeKv = {1024, 16384};
// One mixed batch in the default set: llama3-8b bf16, kv up to 1K.
const char *const kDefaultBatchPreset = "llama3-8b";
const int64_t kDefaultBatchKv = 1024;
const char *const kDefaultVerifyPreset = "llama3-8b";
const int64_t kDefaultVerifyRows = 16;
const std::set<std::string> kDefaultPrefillPresets = {"llama3-8b",
                                                      "qwen2-0.5b"};
const std::set<int64_t> kDefaultPrefillLength = {512, 2048};

bool DefaultDtype(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32 || dtype == FLASHCPU_DTYPE_BF16;
}

bool Named(const toolkit_preset *preset, const char *name) {
  return std::strcmp(preset->name, name) == 0;
}

bool DecodeInDefault(const toolkit_preset *preset, flashcpu_dtype dtype,
                     int64_t kv, int64_t batch) {
  if (batch == 1)
    return kDefaultDecodePresets.count(preset->name) && DefaultDtype(dtype) &&
           kDefaultDecodeKv.count(kv);
  return Named(preset, kDefaultBatchPreset) && dtype == FLASHCPU_DTYPE_BF16 &&
         kv == kDefaultBatchKv;
}

// One case per thread count; only the first (1) and the last (all) can be
// in the default set, so that it stays short on many-core hosts.
void AddThreaded(std::vector<BenchCase> &cases, BenchCase bench_case,
                 const std::vector<int> &thread_counts) {
  const bool in_default = bench_case.in_default_set;
  for (int threads : thread_counts) {
    bench_case.threads = threads;
    bench_case.in_default_set =
        in_default &&
        (threads == thread_counts.front() || threads == thread_counts.back());
    cases.push_back(bench_case);
  }
}

// Regex metacharacters that appear in names ('.' in qwen2.5) escaped.
std::string EscapeRegex(const std::string &text) {
  std::string escaped;
  for (char c : text) {
    if (std::strchr(".+*?()[]{}|^$\\", c)) escaped += '\\';
    escaped += c;
  }
  return escaped;
}

const char *MaskName(BenchMask mask) {
  switch (mask) {
  case BenchMask::kNone:
    return "none";
  case BenchMask::kTree:
    return "tree";
  default:
    return "causal";
  }
}

// At threads 1 and all only; in the default set at all threads.
void AddEnds(std::vector<BenchCase> &cases, BenchCase bench_case,
             const std::vector<int> &thread_counts) {
  const bool in_default = bench_case.in_default_set;
  for (size_t t = 0; t < thread_counts.size(); t++) {
    if (t != 0 && t + 1 != thread_counts.size()) continue;
    bench_case.threads = thread_counts[t];
    bench_case.in_default_set = in_default && t + 1 == thread_counts.size();
    cases.push_back(bench_case);
  }
}

// The case once per quantized KV cache (bf16 q and out), at the ends of
// the thread counts, none in the default set.
void AddQuantized(std::vector<BenchCase> &cases, const BenchCase &bench_case,
                  const std::vector<int> &thread_counts) {
  for (flashcpu_dtype kv_dtype : kQuantizedKv) {
    BenchCase quantized = bench_case;
    quantized.kv_quantized = true;
    quantized.kv_dtype = kv_dtype;
    quantized.in_default_set = false;
    AddEnds(cases, quantized, thread_counts);
  }
}

void AddDecodeCases(std::vector<BenchCase> &cases, const toolkit_preset *preset,
                    const std::vector<int> &thread_counts) {
  for (flashcpu_dtype dtype : kAllDtypes)
    for (int64_t kv : kDecodeKv)
      for (int64_t batch : kDecodeBatch) {
        BenchCase contiguous = {TOOLKIT_PHASE_DECODE,
                                preset,
                                dtype,
                                1,
                                kv,
                                batch,
                                BenchMask::kCausal,
                                0,
                                DecodeInDefault(preset, dtype, kv, batch),
                                ""};
        AddThreaded(cases, contiguous, thread_counts);
        // The same case on paged K/V, right after the contiguous one.
        if (!Named(preset, kPagedPreset) || dtype != FLASHCPU_DTYPE_BF16 ||
            batch != 1 || !kPagedDecodeKv.count(kv))
          continue;
        for (int64_t page_size : kPageSizes) {
          BenchCase paged = contiguous;
          paged.page_size = page_size;
          paged.in_default_set =
              kv == kDefaultPagedKv && page_size == kDefaultPageSize;
          AddEnds(cases, paged, thread_counts);
        }
        // The same case on each quantized KV cache (bf16 q and out).
        AddQuantized(cases, contiguous, thread_counts);
      }
}

// A batch of many short decode requests, contiguous then paged (16), at
// every thread count.
void AddShortBatchCases(std::vector<BenchCase> &cases,
                        const std::vector<int> &thread_counts) {
  BenchCase batch = {TOOLKIT_PHASE_DECODE,
                     toolkit_preset_find(kPagedPreset),
                     FLASHCPU_DTYPE_BF16,
                     1,
                     kShortBatchKv,
                     kShortBatch,
                     BenchMask::kCausal,
                     0,
                     false,
                     ""};
  batch.shortest = kShortestKv;
  for (int64_t page_size : {int64_t{0}, kServePageSize}) {
    batch.page_size = page_size;
    AddThreaded(cases, batch, thread_counts);
  }
}

// The serving step, paged then contiguous, at every thread count; the
// full-size step on pages of 1 too, and on pages of 16 on each quantized
// KV cache at threads 1 and all.
void AddServeCases(std::vector<BenchCase> &cases,
                   const std::vector<int> &thread_counts) {
  const toolkit_preset *preset = toolkit_preset_find(kPagedPreset);
  for (const ServeShape &shape : kServeShapes)
    for (int64_t page_size : {kServePageSize, kServeTokenPage, int64_t{0}}) {
      if (page_size == kServeTokenPage && shape.in_default_set) continue;
      BenchCase serve = {TOOLKIT_PHASE_SERVE,
                         preset,
                         FLASHCPU_DTYPE_BF16,
                         shape.chunk_rows,
                         shape.longest_kv,
                         shape.decode_requests,
                         BenchMask::kCausal,
                         0,
                         false,
                         ""};
      serve.page_size = page_size;
      serve.prefix = shape.prefix;
      const bool in_default =
          shape.in_default_set && page_size == kServePageSize;
      for (int threads : thread_counts) {
        serve.threads = threads;
        serve.in_default_set = in_default && threads == thread_counts.back();
        cases.push_back(serve);
      }
      if (page_size != kServePageSize || shape.in_default_set) continue;
      AddQuantized(cases, serve, thread_counts);
    }
}

void AddVerifyCases(std::vector<BenchCase> &cases, const toolkit_preset *preset,
                    const std::vector<int> &thread_counts) {
  for (flashcpu_dtype dtype : kAllDtypes)
    for (int64_t rows : kVerifyRows) {
      const bool in_default = Named(preset, kDefaultVerifyPreset) &&
                              dtype == FLASHCPU_DTYPE_BF16 &&
                              rows == kDefaultVerifyRows;
      AddThreaded(cases,
                  {TOOLKIT_PHASE_VERIFY, preset, dtype, rows, kVerifyKv, 1,
                   BenchMask::kTree, 0, in_default, ""},
                  thread_counts);
    }
}

void AddPrefillCases(std::vector<BenchCase> &cases,
                     const toolkit_preset *preset,
                     const std::vector<int> &thread_counts) {
  // Encoders see every key; decoders are measured causal and not.
  std::vector<BenchMask> masks = {BenchMask::kNone};
  if (preset->causal) masks.insert(masks.begin(), BenchMask::kCausal);
  for (flashcpu_dtype dtype : kAllDtypes) {
    for (BenchMask mask : masks)
      for (int64_t length : kPrefillLength) {
        const bool in_default =
            kDefaultPrefillPresets.count(preset->name) && DefaultDtype(dtype) &&
            mask == BenchMask::kCausal && kDefaultPrefillLength.count(length);
        AddThreaded(cases,
                    {TOOLKIT_PHASE_PREFILL, preset, dtype, length, length, 1,
                     mask, 0, in_default, ""},
                    thread_counts);
      }
    if (preset->causal) // chunked prefill: new rows onto a long cache
      AddThreaded(cases,
                  {TOOLKIT_PHASE_PREFILL, preset, dtype, kChunkRows, kChunkKv,
                   1, BenchMask::kCausal, 0, false, ""},
                  thread_counts);
  }
}

// Each kernel this CPU runs, forced, on the llama3-8b shape of its family:
// split-KV on bf16 decode (kv 4K) and an 8-row verify, prefill on a causal
// bf16 prefill (L = S = 1024), at 1 and all threads.
void AddKernelCases(std::vector<BenchCase> &cases,
                    const std::vector<int> &thread_counts) {
  const toolkit_preset *preset = toolkit_preset_find("llama3-8b");
  const std::vector<int> ends = {thread_counts.front(), thread_counts.back()};
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++) {
    if (!info.runnable) continue;
    std::vector<BenchCase> shapes;
    if (std::strcmp(info.family, "split-KV decode") == 0) {
      shapes.push_back({TOOLKIT_PHASE_DECODE, preset, FLASHCPU_DTYPE_BF16, 1,
                        4096, 1, BenchMask::kCausal, 0, false, info.name});
      shapes.push_back({TOOLKIT_PHASE_VERIFY, preset, FLASHCPU_DTYPE_BF16, 8,
                        kVerifyKv, 1, BenchMask::kTree, 0, false, info.name});
    } else {
      shapes.push_back({TOOLKIT_PHASE_PREFILL, preset, FLASHCPU_DTYPE_BF16,
                        1024, 1024, 1, BenchMask::kCausal, 0, false,
                        info.name});
    }
    for (const BenchCase &shape : shapes)
      for (size_t t = 0; t < ends.size(); t++) {
        if (t > 0 && ends[t] == ends[0]) continue;
        BenchCase bench_case = shape;
        bench_case.threads = ends[t];
        cases.push_back(bench_case);
      }
  }
}

} // namespace

std::string BenchCaseName(const BenchCase &bench_case) {
  return (bench_case.kernel.empty() ? std::string()
                                    : "kernel:" + bench_case.kernel + "/") +
         toolkit_phase_name(bench_case.phase) + "/" + bench_case.preset->name +
         "/" + flashcpu_dtype_name(bench_case.dtype) +
         (bench_case.kv_quantized
              ? std::string("/kv:") + flashcpu_dtype_name(bench_case.kv_dtype)
              : std::string()) +
         "/L:" + std::to_string(bench_case.rows) +
         (bench_case.phase == TOOLKIT_PHASE_SERVE
              ? "/prefix:" + std::to_string(bench_case.prefix)
              : std::string()) +
         "/S:" + std::to_string(bench_case.kv) +
         (bench_case.shortest > 0
              ? "/from:" + std::to_string(bench_case.shortest)
              : std::string()) +
         "/B:" + std::to_string(bench_case.batch) +
         "/mask:" + MaskName(bench_case.mask) +
         (bench_case.page_size > 0
              ? "/page:" + std::to_string(bench_case.page_size)
              : std::string()) +
         "/threads:" + std::to_string(bench_case.threads);
}

toolkit_workload_spec BenchCaseSpec(const BenchCase &bench_case) {
  toolkit_workload_spec spec = toolkit_workload_spec_make(
      bench_case.preset, bench_case.phase, bench_case.rows, bench_case.kv,
      bench_case.dtype);
  spec.batch = bench_case.batch;
  if (bench_case.kv_quantized) spec.kv_dtype = bench_case.kv_dtype;
  spec.mixed_kv_lengths =
      bench_case.batch > 1 && bench_case.phase != TOOLKIT_PHASE_SERVE;
  spec.page_size = bench_case.page_size;
  spec.shortest_kv = bench_case.shortest;
  if (bench_case.phase == TOOLKIT_PHASE_SERVE)
    spec.prefix_rows = bench_case.prefix;
  if (bench_case.mask == BenchMask::kNone) {
    spec.causal = false;
    spec.window_left = spec.window_right = -1;
  }
  return spec;
}

std::vector<int> BenchThreadCounts(int all_threads) {
  std::vector<int> counts = {1};
  for (int n = 2; n < all_threads; n *= 2) counts.push_back(n);
  if (all_threads > 1) counts.push_back(all_threads);
  return counts;
}

std::vector<BenchCase> AllBenchCases(const std::vector<int> &thread_counts) {
  std::vector<BenchCase> cases;
  int preset_count = 0;
  const toolkit_preset *presets = toolkit_presets(&preset_count);
  // Encoders (not causal) have no decode or verify phase.
  for (int p = 0; p < preset_count; p++)
    if (presets[p].causal) AddDecodeCases(cases, &presets[p], thread_counts);
  for (int p = 0; p < preset_count; p++)
    if (presets[p].causal) AddVerifyCases(cases, &presets[p], thread_counts);
  for (int p = 0; p < preset_count; p++)
    AddPrefillCases(cases, &presets[p], thread_counts);
  AddShortBatchCases(cases, thread_counts);
  AddServeCases(cases, thread_counts);
  AddKernelCases(cases, thread_counts);
  return cases;
}

std::string DefaultSetFilter(const std::vector<BenchCase> &cases) {
  std::string alternatives;
  for (const BenchCase &bench_case : cases) {
    if (!bench_case.in_default_set) continue;
    if (!alternatives.empty()) alternatives += "|";
    alternatives += EscapeRegex(BenchCaseName(bench_case));
  }
  // google-benchmark appends /real_time to names of UseRealTime() cases.
  return "^(" + alternatives + ")(/real_time)?$";
}
