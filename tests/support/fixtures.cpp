#include "fixtures.h"

#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fctest {

ScopedEnv::ScopedEnv(const char *name, const char *value) : name_(name) {
  const char *old = std::getenv(name);
  was_set_ = old != nullptr;
  if (old) old_value_ = old;
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
  if (was_set_)
    setenv(name_.c_str(), old_value_.c_str(), 1);
  else
    unsetenv(name_.c_str());
}

flashcpu_context_options DefaultOptions() {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  return options;
}

flashcpu_status Context::Create(const flashcpu_context_options &options) {
  flashcpu_context_destroy(ctx_);
  ctx_ = nullptr;
  return flashcpu_context_create(&options, &ctx_);
}

flashcpu_context_options KernelOptions(flashcpu_isa isa, const char *kernel,
                                       int threads) {
  flashcpu_context_options options = DefaultOptions();
  options.max_isa = isa;
  if (kernel) AddSetting(options, std::string("kernel = ") + kernel);
  options.num_threads = threads;
  return options;
}

const char *KeptString(const std::string &text) {
  static std::mutex lock;
  static std::set<std::string> kept;
  std::lock_guard<std::mutex> guard(lock);
  return kept.insert(text).first->c_str();
}

void AddSetting(flashcpu_context_options &options, const std::string &entry) {
  const std::string before = options.settings ? options.settings : "";
  options.settings = KeptString(before.empty() ? entry : before + "; " + entry);
}

// GoogleTest's own capture: it redirects file descriptor 2, so the C
// library's fprintf(stderr) is caught too.
StderrCapture::StderrCapture() { testing::internal::CaptureStderr(); }
StderrCapture::~StderrCapture() {
  if (active_) testing::internal::GetCapturedStderr();
}
std::string StderrCapture::Take() {
  if (!active_) return "";
  active_ = false;
  return testing::internal::GetCapturedStderr();
}

std::string ContextDescription(const flashcpu_context *ctx) {
  std::vector<char> text(flashcpu_context_describe(ctx, nullptr, 0) + 1);
  flashcpu_context_describe(ctx, text.data(), text.size());
  return text.data();
}

std::vector<DescribedKernel> DescribedKernels(const flashcpu_context *ctx) {
  std::istringstream text(ContextDescription(ctx));
  std::vector<DescribedKernel> kernels;
  std::string line;
  bool in_list = false;
  while (std::getline(text, line)) {
    if (line == "kernels, in the order the choice tries them:") {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.rfind("  ", 0) != 0) break;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) break;
    DescribedKernel k{line.substr(2, colon - 2), line.substr(colon + 2)};
    if (k.family == "merge" || k.family == "every call") break;
    // " (forced)", " (by the kernel setting only)": notes after the name
    const size_t note = k.name.find(" (");
    if (note != std::string::npos) k.name.resize(note);
    kernels.push_back(k);
  }
  return kernels;
}

std::string DescribedSetting(const flashcpu_context *ctx,
                             const std::string &key) {
  std::istringstream text(ContextDescription(ctx));
  std::string line;
  while (std::getline(text, line)) {
    if (line.rfind("settings: ", 0) != 0) continue;
    std::istringstream words(line.substr(10));
    std::string word;
    while (words >> word)
      if (word.rfind(key + "=", 0) == 0) return word.substr(key.size() + 1);
  }
  return "";
}

std::vector<const char *> RunnableKernelsThenDefault() {
  std::vector<const char *> names;
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++)
    if (info.runnable) names.push_back(info.name);
  names.push_back(nullptr);
  return names;
}

bool CpuHasFeature(const std::string &name) {
  char features[512];
  flashcpu_cpu_features(features, sizeof features);
  return (" " + std::string(features) + " ").find(" " + name + " ") !=
         std::string::npos;
}

bool VendorIsAmd() {
#if defined(__x86_64__)
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string(vendor) == "AuthenticAMD";
#else
  return false;
#endif
}

bool KernelsRoundWeights(const std::string &kernels) {
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++) {
    if (info.weights_dtype != FLASHCPU_DTYPE_BF16) continue;
    const std::string name = info.name;
    for (size_t at = kernels.find(name); at != std::string::npos;
         at = kernels.find(name, at + 1)) {
      const size_t end = at + name.size();
      if ((at == 0 || kernels[at - 1] == ' ') &&
          (end == kernels.size() || kernels[end] == ','))
        return true;
    }
  }
  return false;
}

} // namespace fctest
