// What every test folder shares, written once:
//  - the tests' own storage conversions (double <-> f32/f16/bf16 with
//    round-to-nearest-even) and ulp sizes. Written with double arithmetic
//    (frexp, ldexp, nearbyint) rather than bit tricks, so that they share
//    neither code nor method with src/common/dtype_convert.h, which they
//    check;
//  - ScopedEnv: an environment variable set (or unset) for one scope, for
//    the few tests of the variables themselves (FLASHCPU_ISA,
//    FLASHCPU_VERBOSE, FLASHCPU_TUNE_FILE, OMP_NUM_THREADS); everything else
//    is a context option;
//  - Context: a context made from options (an ISA cap, a forced kernel,
//    settings), destroyed with its scope;
//  - StderrCapture: what the library writes to stderr (FLASHCPU_VERBOSE);
//  - ContextDescription, the kernel lines of flashcpu_context_describe,
//    CpuHasFeature and VendorIsAmd.
#ifndef FLASHCPU_TESTS_SUPPORT_FIXTURES_H
#define FLASHCPU_TESTS_SUPPORT_FIXTURES_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flashcpu/flashcpu.h"

namespace fctest {

struct FloatFormat {
  int mantissa_bits; // explicit fraction bits
  int min_exponent;  // exponent of the smallest normal
  int max_exponent;  // exponent of the largest finite value
  int exponent_bias;
};

inline constexpr FloatFormat kHalfFormat{10, -14, 15, 15};
inline constexpr FloatFormat kBfloat16Format{7, -126, 127, 127};

// Rounds x to the nearest value of the format (ties to even), with
// overflow to infinity exactly where IEEE puts it. NaN stays NaN.
inline double RoundToFormat(double x, const FloatFormat &format) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  double magnitude = std::fabs(x);
  int exponent;
  std::frexp(magnitude, &exponent); // magnitude = m * 2^exponent, m in [0.5, 1)
  int unbiased = exponent - 1;
  if (unbiased < format.min_exponent) unbiased = format.min_exponent;
  double quantum = std::ldexp(1.0, unbiased - format.mantissa_bits);
  double rounded = std::nearbyint(magnitude / quantum) * quantum;
  if (rounded >= std::ldexp(1.0, format.max_exponent + 1)) rounded = INFINITY;
  return std::copysign(rounded, x);
}

// Bits of a value already representable in the format (after RoundToFormat).
inline uint16_t EncodeExact(double value, const FloatFormat &format) {
  const int total_exponent_bits = format.mantissa_bits == 10 ? 5 : 8;
  const uint32_t exponent_all_ones = (1u << total_exponent_bits) - 1;
  uint32_t sign = std::signbit(value) ? 1u : 0u;
  uint32_t sign_bit = sign << 15;
  if (std::isnan(value)) // a quiet NaN
    return static_cast<uint16_t>(sign_bit |
                                 (exponent_all_ones << format.mantissa_bits) |
                                 (1u << (format.mantissa_bits - 1)));
  if (std::isinf(value))
    return static_cast<uint16_t>(sign_bit |
                                 (exponent_all_ones << format.mantissa_bits));
  double magnitude = std::fabs(value);
  if (magnitude < std::ldexp(1.0, format.min_exponent)) { // subnormal or 0
    double units =
        std::ldexp(magnitude, format.mantissa_bits - format.min_exponent);
    return static_cast<uint16_t>(sign_bit | static_cast<uint32_t>(units));
  }
  int exponent;
  std::frexp(magnitude, &exponent);
  int unbiased = exponent - 1;
  double fraction = std::ldexp(magnitude, -unbiased) - 1.0; // in [0, 1)
  uint32_t mantissa =
      static_cast<uint32_t>(std::ldexp(fraction, format.mantissa_bits));
  uint32_t biased = static_cast<uint32_t>(unbiased + format.exponent_bias);
  return static_cast<uint16_t>(sign_bit | (biased << format.mantissa_bits) |
                               mantissa);
}

inline double Decode16(uint16_t bits, const FloatFormat &format) {
  const int total_exponent_bits = format.mantissa_bits == 10 ? 5 : 8;
  const uint32_t exponent_all_ones = (1u << total_exponent_bits) - 1;
  uint32_t sign = bits >> 15;
  uint32_t biased = (bits >> format.mantissa_bits) & exponent_all_ones;
  uint32_t mantissa = bits & ((1u << format.mantissa_bits) - 1);
  double magnitude;
  if (biased == exponent_all_ones)
    magnitude = mantissa ? NAN : INFINITY;
  else if (biased == 0)
    magnitude = std::ldexp(static_cast<double>(mantissa),
                           format.min_exponent - format.mantissa_bits);
  else
    magnitude = std::ldexp(
        1.0 + std::ldexp(static_cast<double>(mantissa), -format.mantissa_bits),
        static_cast<int>(biased) - format.exponent_bias);
  return sign ? -magnitude : magnitude;
}

inline uint16_t EncodeHalf(double x) {
  return EncodeExact(RoundToFormat(x, kHalfFormat), kHalfFormat);
}
inline uint16_t EncodeBfloat16(double x) {
  return EncodeExact(RoundToFormat(x, kBfloat16Format), kBfloat16Format);
}
inline double DecodeHalf(uint16_t bits) { return Decode16(bits, kHalfFormat); }
inline double DecodeBfloat16(uint16_t bits) {
  return Decode16(bits, kBfloat16Format);
}

// Bytes per element, independent of flashcpu_dtype_size (which is tested).
inline size_t ElementBytes(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32 ? 4 : 2;
}

// The value x becomes once stored as dtype.
inline double RoundToDtype(double x, flashcpu_dtype dtype) {
  switch (dtype) {
  case FLASHCPU_DTYPE_F32:
    return static_cast<double>(static_cast<float>(x));
  case FLASHCPU_DTYPE_F16:
    return RoundToFormat(x, kHalfFormat);
  case FLASHCPU_DTYPE_BF16:
    return RoundToFormat(x, kBfloat16Format);
  default:
    return NAN; // quantized dtypes are not a rounding target
  }
}

inline void StoreAs(void *where, flashcpu_dtype dtype, double x) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    float value = static_cast<float>(x);
    std::memcpy(where, &value, sizeof value);
  } else {
    uint16_t bits =
        dtype == FLASHCPU_DTYPE_F16 ? EncodeHalf(x) : EncodeBfloat16(x);
    std::memcpy(where, &bits, sizeof bits);
  }
}

inline double LoadAs(const void *where, flashcpu_dtype dtype) {
  if (dtype == FLASHCPU_DTYPE_F32) {
    float value;
    std::memcpy(&value, where, sizeof value);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, where, sizeof bits);
  return dtype == FLASHCPU_DTYPE_F16 ? DecodeHalf(bits) : DecodeBfloat16(bits);
}

// The spacing of dtype's values at |x| (the subnormal spacing below the
// smallest normal).
inline double UlpOf(flashcpu_dtype dtype, double x) {
  int mantissa_bits = 23, min_exponent = -126;
  if (dtype == FLASHCPU_DTYPE_F16) {
    mantissa_bits = kHalfFormat.mantissa_bits;
    min_exponent = kHalfFormat.min_exponent;
  } else if (dtype == FLASHCPU_DTYPE_BF16) {
    mantissa_bits = kBfloat16Format.mantissa_bits;
    min_exponent = kBfloat16Format.min_exponent;
  }
  double magnitude = std::fabs(x);
  int exponent = min_exponent;
  if (magnitude >= std::ldexp(1.0, min_exponent)) {
    std::frexp(magnitude, &exponent);
    exponent -= 1;
  }
  return std::ldexp(1.0, exponent - mantissa_bits);
}

// ---- environment ---------------------------------------------------------

// Sets (value != nullptr) or unsets `name` until the end of the scope, then
// restores the value it had before.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  std::string name_, old_value_;
  bool was_set_ = false;
};

// ---- contexts --------------------------------------------------------------

// Options with the defaults (flashcpu_context_options_init).
flashcpu_context_options DefaultOptions();

// A context owned by its scope. Create() returns the status; ok() says
// whether one exists.
class Context {
public:
  Context() = default;
  explicit Context(const flashcpu_context_options &options) { Create(options); }
  ~Context() { flashcpu_context_destroy(ctx_); }
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;
  Context(Context &&other) noexcept : ctx_(other.ctx_) { other.ctx_ = nullptr; }

  flashcpu_status Create(const flashcpu_context_options &options);
  flashcpu_context *get() const { return ctx_; }
  operator flashcpu_context *() const { return ctx_; } // NOLINT: a handle
  bool ok() const { return ctx_ != nullptr; }

private:
  flashcpu_context *ctx_ = nullptr;
};

// The options of a context capped at `isa` (FLASHCPU_ISA_AUTO: no cap)
// that runs the kernel called `kernel` for every call (nullptr: the
// choice), with `threads` threads (0: the default).
flashcpu_context_options KernelOptions(flashcpu_isa isa, const char *kernel,
                                       int threads = 0);

// A copy of text that lives as long as the test process: options hold
// their settings string by pointer, and outlive the expression that built
// it.
const char *KeptString(const std::string &text);

// Appends "; entry" to the options' settings string (or makes it `entry`).
void AddSetting(flashcpu_context_options &options, const std::string &entry);

// ---- stderr ----------------------------------------------------------------

// Captures what is written to stderr (file descriptor 2) from construction
// to Take() (or destruction).
class StderrCapture {
public:
  StderrCapture();
  ~StderrCapture();
  StderrCapture(const StderrCapture &) = delete;
  StderrCapture &operator=(const StderrCapture &) = delete;
  std::string Take();

private:
  bool active_ = true;
};

// ---- describe and the CPU --------------------------------------------------

// flashcpu_context_describe's whole text for ctx.
std::string ContextDescription(const flashcpu_context *ctx);

// One line "  <family>: <name>" of the describe text's kernel list.
struct DescribedKernel {
  std::string family, name;
};
// The kernels ctx's choice tries, in order (the lines after "kernels, in
// the order the choice tries them:" up to the merge line).
std::vector<DescribedKernel> DescribedKernels(const flashcpu_context *ctx);
// The value of `key` on the describe text's "settings: key=value ..." line
// ("" if absent).
std::string DescribedSetting(const flashcpu_context *ctx,
                             const std::string &key);

// The names of the kernels this CPU runs, then nullptr (the context's own
// choice): what a test forces in turn.
std::vector<const char *> RunnableKernelsThenDefault();

// Whether flashcpu_cpu_features() lists name (e.g. "avx512_bf16").
bool CpuHasFeature(const std::string &name);

// Whether any kernel named in `kernels` (flashcpu_context_last_kernels:
// names separated by ", ") rounds P to bf16 (flashcpu_kernel_info's
// weights_dtype), so that its tolerance takes the bf16-weights naive code.
bool KernelsRoundWeights(const std::string &kernels);
// Whether this is an x86 CPU whose cpuid vendor is "AuthenticAMD" (some
// settings' defaults differ there).
bool VendorIsAmd();

} // namespace fctest

#endif // FLASHCPU_TESTS_SUPPORT_FIXTURES_H
