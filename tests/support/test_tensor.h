// Strided test tensors: a byte buffer holding one flashcpu_tensor view in a
// chosen layout, with every byte outside the view kept as poison (NaN) so
// that a kernel reading or writing outside the view shows up.
#ifndef FLASHCPU_TESTS_TEST_TENSOR_H
#define FLASHCPU_TESTS_TEST_TENSOR_H

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flashcpu/flashcpu.h"

namespace fctest {

// A small deterministic generator (splitmix64): the same seed gives the same
// inputs with any compiler and standard library.
class Rng {
public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t NextU64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() {
    return static_cast<double>(NextU64() >> 11) * 0x1p-53;
  } // [0, 1)
  double Uniform(double low, double high) {
    return low + (high - low) * Uniform();
  }
  int64_t Below(int64_t n) {
    return static_cast<int64_t>(NextU64() % static_cast<uint64_t>(n));
  }
  bool Chance(double p) { return Uniform() < p; }
  // Never zero: magnitude in [1/64, 1), random sign.
  double NonZeroUnit() {
    double magnitude = Uniform(1.0 / 64.0, 1.0);
    return (NextU64() & 1) ? magnitude : -magnitude;
  }

private:
  uint64_t state_;
};

enum class Layout {
  kBSHD,      // contiguous [batch, seq, heads, head_dim]
  kBHSD,      // contiguous [batch, heads, seq, head_dim]
  kCache,     // BHSD allocated for more rows than used, padded rows
  kUnaligned, // BSHD with padded rows, data one element past 64-byte alignment
};
const char *LayoutName(Layout layout);

class TestTensor {
public:
  TestTensor() = default;
  // dims: [batch, seq, heads, head_dim]; seq_capacity >= dims[1] rows are
  // allocated per (batch, head).
  TestTensor(flashcpu_dtype dtype, std::array<int64_t, 4> dims, Layout layout,
             int64_t seq_capacity);
  // Moves keep the buffer (and so its alignment); copies would not.
  TestTensor(TestTensor &&) = default;
  TestTensor &operator=(TestTensor &&) = default;
  TestTensor(const TestTensor &) = delete;
  TestTensor &operator=(const TestTensor &) = delete;

  flashcpu_tensor View() const;
  flashcpu_dtype dtype() const { return dtype_; }
  const std::array<int64_t, 4> &dims() const { return dims_; }
  const std::array<int64_t, 4> &strides() const { return strides_; }
  // Element (b, s, h, d) as stored / storing x rounded to the dtype. s may go
  // up to the capacity (rows past the view, used for poison).
  double Get(int64_t b, int64_t s, int64_t h, int64_t d) const;
  void Set(int64_t b, int64_t s, int64_t h, int64_t d, double x);
  int64_t seq_capacity() const { return seq_capacity_; }

  // Every byte of the buffer becomes NaN of the dtype.
  void Poison();
  const std::vector<unsigned char> &bytes() const { return storage_; }
  // Bytes the view covers, as a flag per byte of bytes().
  std::vector<bool> ViewBytes() const;
  unsigned char *data() { return storage_.data() + offset_; }

private:
  size_t ByteIndex(int64_t b, int64_t s, int64_t h, int64_t d) const;

  flashcpu_dtype dtype_ = FLASHCPU_DTYPE_F32;
  std::array<int64_t, 4> dims_{};
  std::array<int64_t, 4> strides_{};
  int64_t seq_capacity_ = 0;
  size_t offset_ = 0; // bytes from storage_.data() to element 0
  std::vector<unsigned char> storage_;
};

// The elements of t in order, each as its stored value widened exactly to
// double, as bits (buffers differ in alignment padding, so their raw bytes
// cannot be compared).
std::vector<uint64_t> ElementBits(const TestTensor &t);

// Every byte of `after` outside `view_bytes` equals `before`; else a message
// naming the first changed byte.
std::string CompareOutsideView(const std::vector<unsigned char> &before,
                               const std::vector<unsigned char> &after,
                               const std::vector<bool> &view_bytes);

} // namespace fctest

#endif // FLASHCPU_TESTS_TEST_TENSOR_H
