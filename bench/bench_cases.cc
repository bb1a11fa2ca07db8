// Which shapes are measured. The default set stays runnable in a few minutes
// on two cores with the portable kernels; the full set follows PERF.md
// (decode KV 1K to 128K, speculative verify of 4 and 16 draft rows, prefill
// L = S = 512 to 16K, chunked prefill of 512 rows onto 8K) and is selected
// with --benchmark_filter.
#include "bench_cases.h"

#include <cstring>
#include <set>

namespace {

const flashcpu_dtype kAllDtypes[] = {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16,
                                     FLASHCPU_DTYPE_BF16};
const int64_t kDecodeKv[] = {1024, 4096, 8192, 32768, 131072};
const int64_t kVerifyRows[] = {4, 16};
const int64_t kVerifyKv = 8192;
const int64_t kPrefillLength[] = {512, 2048, 8192, 16384};
const int64_t kChunkRows = 512, kChunkKv = 8192;

const std::set<std::string> kDefaultDecodePresets = {"llama3-8b", "qwen2.5-7b",
                                                     "gemma2-9b"};
const std::set<std::string> kDefaultPrefillPresets = {"llama3-8b",
                                                      "qwen2-0.5b"};
const std::set<int64_t> kDefaultDecodeKv = {1024, 8192};
const char *const kDefaultVerifyPreset = "llama3-8b";
const int64_t kDefaultVerifyRows = 16;
const std::set<int64_t> kDefaultPrefillLength = {512, 2048};

bool DefaultDtype(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32 || dtype == FLASHCPU_DTYPE_BF16;
}

void AddThreaded(std::vector<BenchCase> &cases, BenchCase bench_case,
                 const std::vector<int> &thread_counts) {
  for (int threads : thread_counts) {
    bench_case.threads = threads;
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

} // namespace

std::string BenchCaseName(const BenchCase &bench_case) {
  return std::string(toolkit_phase_name(bench_case.phase)) + "/" +
         bench_case.preset->name + "/" + flashcpu_dtype_name(bench_case.dtype) +
         "/L:" + std::to_string(bench_case.rows) +
         "/S:" + std::to_string(bench_case.kv) +
         "/threads:" + std::to_string(bench_case.threads);
}

std::vector<BenchCase> AllBenchCases(const std::vector<int> &thread_counts) {
  std::vector<BenchCase> cases;
  int preset_count = 0;
  const toolkit_preset *presets = toolkit_presets(&preset_count);
  for (int p = 0; p < preset_count; p++) {
    const toolkit_preset *preset = &presets[p];
    if (!preset->causal) continue; // encoders have no decode phase
    for (flashcpu_dtype dtype : kAllDtypes)
      for (int64_t kv : kDecodeKv) {
        bool in_default = kDefaultDecodePresets.count(preset->name) &&
                          DefaultDtype(dtype) && kDefaultDecodeKv.count(kv);
        AddThreaded(cases,
                    {TOOLKIT_PHASE_DECODE, preset, dtype, 1, kv, 0, in_default},
                    thread_counts);
      }
  }
  for (int p = 0; p < preset_count; p++) {
    const toolkit_preset *preset = &presets[p];
    if (!preset->causal) continue;
    for (flashcpu_dtype dtype : kAllDtypes)
      for (int64_t rows : kVerifyRows) {
        bool in_default = std::strcmp(preset->name, kDefaultVerifyPreset) == 0 &&
                          dtype == FLASHCPU_DTYPE_BF16 &&
                          rows == kDefaultVerifyRows;
        AddThreaded(cases,
                    {TOOLKIT_PHASE_VERIFY, preset, dtype, rows, kVerifyKv, 0,
                     in_default},
                    thread_counts);
      }
  }
  for (int p = 0; p < preset_count; p++) {
    const toolkit_preset *preset = &presets[p];
    for (flashcpu_dtype dtype : kAllDtypes) {
      for (int64_t length : kPrefillLength) {
        bool in_default = kDefaultPrefillPresets.count(preset->name) &&
                          DefaultDtype(dtype) &&
                          kDefaultPrefillLength.count(length);
        AddThreaded(cases,
                    {TOOLKIT_PHASE_PREFILL, preset, dtype, length, length, 0,
                     in_default},
                    thread_counts);
      }
      if (preset->causal) // chunked prefill: new rows onto a long cache
        AddThreaded(cases,
                    {TOOLKIT_PHASE_PREFILL, preset, dtype, kChunkRows,
                     kChunkKv, 0, false},
                    thread_counts);
    }
  }
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
