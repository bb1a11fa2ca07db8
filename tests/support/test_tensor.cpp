#include "test_tensor.h"

#include <cstdint>
#include <cstring>
#include <sstream>

#include "fixtures.h"

namespace fctest {

const char *LayoutName(Layout layout) {
  switch (layout) {
  case Layout::kBSHD:
    return "bshd";
  case Layout::kBHSD:
    return "bhsd";
  case Layout::kCache:
    return "cache";
  case Layout::kUnaligned:
    return "unaligned";
  }
  return "?";
}

TestTensor::TestTensor(flashcpu_dtype dtype, std::array<int64_t, 4> dims,
                       Layout layout, int64_t seq_capacity)
    : dtype_(dtype), dims_(dims), seq_capacity_(seq_capacity) {
  const int64_t heads = dims[2], head_dim = dims[3];
  const int64_t capacity = seq_capacity < 1 ? 1 : seq_capacity;
  int64_t row = head_dim;
  switch (layout) {
  case Layout::kBSHD:
    strides_ = {capacity * heads * row, heads * row, row, 1};
    break;
  case Layout::kBHSD:
    strides_ = {heads * capacity * row, row, capacity * row, 1};
    break;
  case Layout::kCache:
    row = head_dim + 3;
    strides_ = {heads * capacity * row, row, capacity * row, 1};
    break;
  case Layout::kUnaligned:
    row = head_dim + 1;
    strides_ = {capacity * heads * row, heads * row, row, 1};
    break;
  }
  const size_t element = ElementBytes(dtype);
  const int64_t elements = dims[0] * strides_[0];
  storage_.assign(static_cast<size_t>(elements) * element + 2 * 64, 0);
  const uintptr_t address = reinterpret_cast<uintptr_t>(storage_.data());
  offset_ = (64 - address % 64) % 64;
  if (layout == Layout::kUnaligned) offset_ += element;
  Poison();
}

flashcpu_tensor TestTensor::View() const {
  flashcpu_tensor view;
  std::memset(&view, 0, sizeof view);
  view.data = const_cast<unsigned char *>(storage_.data() + offset_);
  view.dtype = dtype_;
  for (int d = 0; d < 4; d++) {
    view.dims[d] = dims_[d];
    view.strides[d] = strides_[d];
  }
  return view;
}

size_t TestTensor::ByteIndex(int64_t b, int64_t s, int64_t h, int64_t d) const {
  int64_t index = b * strides_[0] + s * strides_[1] + h * strides_[2] + d;
  return offset_ + static_cast<size_t>(index) * ElementBytes(dtype_);
}

double TestTensor::Get(int64_t b, int64_t s, int64_t h, int64_t d) const {
  return LoadAs(storage_.data() + ByteIndex(b, s, h, d), dtype_);
}

void TestTensor::Set(int64_t b, int64_t s, int64_t h, int64_t d, double x) {
  StoreAs(storage_.data() + ByteIndex(b, s, h, d), dtype_, x);
}

void TestTensor::Poison() {
  const size_t element = ElementBytes(dtype_);
  unsigned char nan_bytes[4];
  StoreAs(nan_bytes, dtype_, NAN);
  for (size_t i = 0; i < storage_.size(); i++)
    storage_[i] = nan_bytes[i % element];
}

std::vector<bool> TestTensor::ViewBytes() const {
  std::vector<bool> covered(storage_.size(), false);
  const size_t element = ElementBytes(dtype_);
  for (int64_t b = 0; b < dims_[0]; b++)
    for (int64_t s = 0; s < dims_[1]; s++)
      for (int64_t h = 0; h < dims_[2]; h++)
        for (int64_t d = 0; d < dims_[3]; d++) {
          size_t first = ByteIndex(b, s, h, d);
          for (size_t byte = 0; byte < element; byte++)
            covered[first + byte] = true;
        }
  return covered;
}

std::string CompareOutsideView(const std::vector<unsigned char> &before,
                               const std::vector<unsigned char> &after,
                               const std::vector<bool> &view_bytes) {
  for (size_t i = 0; i < before.size(); i++)
    if (!view_bytes[i] && before[i] != after[i]) {
      std::ostringstream message;
      message << "byte " << i << " outside the view changed from "
              << static_cast<int>(before[i]) << " to "
              << static_cast<int>(after[i]);
      return message.str();
    }
  return "";
}

std::vector<uint64_t> ElementBits(const TestTensor &t) {
  std::vector<uint64_t> bits;
  const std::array<int64_t, 4> &dims = t.dims();
  for (int64_t b = 0; b < dims[0]; b++)
    for (int64_t s = 0; s < dims[1]; s++)
      for (int64_t h = 0; h < dims[2]; h++)
        for (int64_t d = 0; d < dims[3]; d++) {
          const double x = t.Get(b, s, h, d);
          uint64_t word;
          std::memcpy(&word, &x, sizeof word);
          bits.push_back(word);
        }
  return bits;
}

} // namespace fctest
