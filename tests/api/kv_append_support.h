// What the flashcpu_kv_append suites share: dtypes, a paged cache with its
// layouts, new rows to append, and the check that pages hold the rounded
// rows and nothing else changed.
#ifndef FLASHCPU_TESTS_API_KV_APPEND_SUPPORT_H
#define FLASHCPU_TESTS_API_KV_APPEND_SUPPORT_H

//    K/V, for every kernel this CPU runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "bad_call.h"
#include "fixtures.h"
#include "paged_call.h"
#include "test_tensor.h"

namespace fctest {
namespace kv_append {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;
constexpr flashcpu_dtype kDtypes[3] = {F32, F16, BF16};
constexpr unsigned char kPoison = 0x5a; // not NaN in any dtype

inline bool IsNan(const unsigned char *element, flashcpu_dtype dtype) {
  return std::isnan(LoadAs(element, dtype));
}

enum class PageLayout { kNhd, kHnd, kGaps };
inline const char *PageLayoutName(PageLayout layout) {
  switch (layout) {
  case PageLayout::kNhd:
    return "nhd";
  case PageLayout::kHnd:
    return "hnd";
  case PageLayout::kGaps:
    return "gaps";
  }
  return "?";
}

// One layer's pages: K and V each in a buffer preset to kPoison.
struct PagedCache {
  PagedCache(flashcpu_dtype k_dtype, flashcpu_dtype v_dtype, int64_t pages,
             int64_t page_size, int64_t heads, int64_t dim, int64_t v_dim,
             PageLayout layout) {
    // The helpers' strides, then the dims and dtypes set apart.
    view = layout == PageLayout::kHnd
               ? flashcpu_paged_kv_hnd(nullptr, nullptr, k_dtype, pages,
                                       page_size, heads, dim)
               : flashcpu_paged_kv_nhd(nullptr, nullptr, k_dtype, pages,
                                       page_size, heads, dim);
    view.v_dtype = v_dtype;
    view.v_head_dim = v_dim;
    for (int side = 0; side < 2; side++) {
      const int64_t d = side ? v_dim : dim;
      int64_t *strides = side ? view.v_strides : view.k_strides;
      if (layout == PageLayout::kNhd) {
        strides[2] = d;
        strides[1] = heads * d;
        strides[0] = page_size * heads * d;
      } else if (layout == PageLayout::kHnd) {
        strides[1] = d;
        strides[2] = page_size * d;
        strides[0] = heads * page_size * d;
      } else { // NHD with gaps after every head row, slot and page
        strides[2] = d + 1;
        strides[1] = heads * (d + 1) + 3;
        strides[0] = page_size * strides[1] + 5;
      }
      const int64_t elements = (pages - 1) * strides[0] +
                               (page_size - 1) * strides[1] +
                               (heads - 1) * strides[2] + d;
      bytes[side].assign(static_cast<size_t>(elements) *
                             ElementBytes(side ? v_dtype : k_dtype),
                         kPoison);
    }
    view.k = bytes[0].data();
    view.v = bytes[1].data();
  }
  // Byte offset of element d of (slot, head) of K (side 0) or V (side 1).
  size_t Offset(int side, int64_t slot, int64_t head, int64_t d) const {
    const int64_t *s = side ? view.v_strides : view.k_strides;
    const int64_t page = slot / view.page_size, in_page = slot % view.page_size;
    return static_cast<size_t>(
        (page * s[0] + in_page * s[1] + head * s[2] + d) *
        static_cast<int64_t>(ElementBytes(dtype(side))));
  }
  flashcpu_dtype dtype(int side) const {
    return side ? view.v_dtype : view.k_dtype;
  }
  int64_t dim(int side) const { return side ? view.v_head_dim : view.head_dim; }

  flashcpu_paged_kv view;
  std::vector<unsigned char> bytes[2];
};

// New rows [1, T, heads, dim] in a buffer of their own.
struct NewRows {
  NewRows(flashcpu_dtype dtype, int64_t tokens, int64_t heads, int64_t dim,
          bool heads_major)
      : bytes(static_cast<size_t>(std::max<int64_t>(tokens, 1) * heads * dim) *
              ElementBytes(dtype)) {
    view =
        heads_major
            ? flashcpu_tensor_bhsd(bytes.data(), dtype, 1, heads, tokens, dim)
            : flashcpu_tensor_bshd(bytes.data(), dtype, 1, tokens, heads, dim);
  }
  unsigned char *At(int64_t t, int64_t h, int64_t d) {
    return bytes.data() + (t * view.strides[1] + h * view.strides[2] + d) *
                              static_cast<int64_t>(ElementBytes(view.dtype));
  }
  std::vector<unsigned char> bytes;
  flashcpu_tensor view;
};

// Values that exercise a conversion: specials (NaN with payloads, infinities,
// -0, subnormals, values that overflow or tie in the narrower dtypes) by
// their bits, then random values over a wide range of magnitudes.
inline void FillValues(NewRows &rows, uint64_t seed) {
  const flashcpu_dtype dtype = rows.view.dtype;
  std::vector<uint32_t> specials;
  if (dtype == F32)
    specials = {0x7fa00001u /* signalling NaN, payload */,
                0xffc12345u,
                0x7f800000u,
                0xff800000u,
                0x80000000u,
                0x00000005u /* subnormal */,
                0x477ff000u /* 65520: f16 inf */,
                0x477fe000u /* 65504 */,
                0x3f801000u /* 1 + 2^-11: f16 tie to even */,
                0x3f808000u /* 1 + 2^-8: bf16 tie to even (down) */,
                0x3f818000u /* bf16 tie to even (up) */,
                0x33800000u /* 2^-24: f16 min subnormal */,
                0x7f7fffffu /* FLT_MAX: bf16 inf */};
  else if (dtype == F16)
    specials = {0x7c01u /* signalling NaN */,
                0xfe55u,
                0x7c00u,
                0xfc00u,
                0x8000u,
                0x0001u,
                0x03ffu,
                0x7bffu,
                0x3c01u /* 1 + 2^-10: bf16 tie */,
                0x3c03u};
  else
    specials = {0x7f81u /* signalling NaN */,
                0xffc5u,
                0x7f80u,
                0xff80u,
                0x8000u,
                0x0001u /* f16: 0 */,
                0x7f7fu /* f16: inf */,
                0x477fu,
                0x3381u /* f16 subnormal range */,
                0x3f81u};
  Rng rng(seed);
  const int64_t tokens = rows.view.dims[1], heads = rows.view.dims[2],
                dim = rows.view.dims[3];
  size_t next_special = 0;
  for (int64_t t = 0; t < tokens; t++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t d = 0; d < dim; d++) {
        unsigned char *at = rows.At(t, h, d);
        if (next_special < specials.size() && rng.Chance(0.3)) {
          const uint32_t bits = specials[next_special++];
          if (dtype == F32) {
            std::memcpy(at, &bits, 4);
          } else {
            const uint16_t half = static_cast<uint16_t>(bits);
            std::memcpy(at, &half, 2);
          }
        } else {
          StoreAs(at, dtype,
                  std::ldexp(rng.NonZeroUnit(),
                             static_cast<int>(rng.Below(41)) - 20));
        }
      }
}

// Random distinct slots of the pool, every fifth row -1 (skipped).
inline std::vector<int64_t> RandomSlots(int64_t tokens, int64_t capacity,
                                        uint64_t seed) {
  std::vector<int64_t> all(static_cast<size_t>(capacity));
  std::iota(all.begin(), all.end(), 0);
  Rng rng(seed);
  for (size_t i = all.size(); i > 1; i--)
    std::swap(all[i - 1],
              all[static_cast<size_t>(rng.Below(static_cast<int64_t>(i)))]);
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; t++)
    slots[static_cast<size_t>(t)] =
        t % 5 == 3 ? -1 : all[static_cast<size_t>(t)];
  return slots;
}

// Checks the pages after an append of rows (k, v) to slots: each written
// element holds the source value as the cache dtype rounds it (bit for bit
// from the same dtype; any NaN for a NaN from another dtype), and every
// other byte is still kPoison.
inline testing::AssertionResult PagesHold(const PagedCache &cache,
                                          NewRows *sources[2],
                                          const std::vector<int64_t> &slots) {
  for (int side = 0; side < 2; side++) {
    const flashcpu_dtype to = cache.dtype(side),
                         from = sources[side]->view.dtype;
    const size_t size = ElementBytes(to);
    std::vector<unsigned char> expected(cache.bytes[side].size(), kPoison);
    std::vector<bool> any_nan(expected.size() / size, false);
    for (size_t t = 0; t < slots.size(); t++) {
      if (slots[t] < 0) continue;
      for (int64_t h = 0; h < cache.view.kv_heads; h++)
        for (int64_t d = 0; d < cache.dim(side); d++) {
          const size_t at = cache.Offset(side, slots[t], h, d);
          const unsigned char *source =
              sources[side]->At(static_cast<int64_t>(t), h, d);
          if (from == to)
            std::memcpy(&expected[at], source, size);
          else if (IsNan(source, from))
            any_nan[at / size] = true;
          else
            StoreAs(&expected[at], to, LoadAs(source, from));
        }
    }
    const std::vector<unsigned char> &actual = cache.bytes[side];
    for (size_t e = 0; e < any_nan.size(); e++) {
      const size_t at = e * size;
      const bool ok = any_nan[e]
                          ? IsNan(&actual[at], to)
                          : std::memcmp(&actual[at], &expected[at], size) == 0;
      if (!ok)
        return testing::AssertionFailure()
               << (side ? "V" : "K") << " element " << e << " ("
               << flashcpu_dtype_name(from) << " -> " << flashcpu_dtype_name(to)
               << "): got " << LoadAs(&actual[at], to) << ", expected "
               << (any_nan[e] ? NAN : LoadAs(&expected[at], to));
    }
  }
  return testing::AssertionSuccess();
}

} // namespace kv_append
} // namespace fctest

#endif
