// What attention_case.cpp and attention_case_paged.cpp share.
#ifndef FLASHCPU_TESTS_SUPPORT_ATTENTION_CASE_INTERNAL_H
#define FLASHCPU_TESTS_SUPPORT_ATTENTION_CASE_INTERNAL_H

#include <cstdint>
#include <cstring>
#include <vector>

#include "fixtures.h"
#include "flashcpu/flashcpu.h"

namespace fctest {
namespace attention_case_detail {

constexpr int64_t kLseGuard = 16; // floats of guard before and after lse

inline bool SameBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The paged re-run's page sizes; with the NHD and HND layouts, eight
// combinations, one per case picked from its seed and shape.
constexpr int64_t kPageSizes[] = {1, 3, 16, 128};

// Address of element (b, s, h, 0) of a view.
inline unsigned char *RowAt(const flashcpu_tensor &t, int64_t b, int64_t s,
                            int64_t h) {
  return static_cast<unsigned char *>(t.data) +
         (b * t.strides[0] + s * t.strides[1] + h * t.strides[2]) *
             static_cast<int64_t>(ElementBytes(t.dtype));
}

// Whether two float buffers hold the same bits (NaN != NaN for operator==).
inline bool SameFloats(const std::vector<float> &a,
                       const std::vector<float> &b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

} // namespace attention_case_detail
} // namespace fctest

#endif
