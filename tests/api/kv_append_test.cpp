// flashcpu_kv_append, through the public API:
//  - round trips: rows of each dtype into caches of each dtype (NHD, HND and
//    a layout with gaps between rows; pages of 1, 3 and 16 tokens) read back
//    as the conversion rounds them (to nearest even), the same dtype bit for
//    bit, NaN payloads included; slot -1 skips a row; every other byte of
//    the pages stays as it was;
//  - errors: each case breaks one thing and expects the status, a message
//    naming the argument and index, and the pages unchanged;
//  - end to end: a sequence appended token by token (decode steps) and in
//    chunks (prefill) fills the same pages, and attention through a plan
//    over them writes the bytes flashcpu_attention writes on the contiguous
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
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;
constexpr flashcpu_dtype kDtypes[3] = {F32, F16, BF16};
constexpr unsigned char kPoison = 0x5a; // not NaN in any dtype

bool IsNan(const unsigned char *element, flashcpu_dtype dtype) {
  return std::isnan(LoadAs(element, dtype));
}

enum class PageLayout { kNhd, kHnd, kGaps };
const char *PageLayoutName(PageLayout layout) {
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
void FillValues(NewRows &rows, uint64_t seed) {
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
std::vector<int64_t> RandomSlots(int64_t tokens, int64_t capacity,
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
testing::AssertionResult PagesHold(const PagedCache &cache, NewRows *sources[2],
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

// ---------------------------------------------------------------------------
// Round trips.

class AppendRoundTrip : public testing::TestWithParam<
                            std::tuple<flashcpu_dtype, flashcpu_dtype>> {};

TEST_P(AppendRoundTrip, PagesHoldTheRoundedRowsAndNothingElseChanges) {
  const flashcpu_dtype source = std::get<0>(GetParam()),
                       target = std::get<1>(GetParam());
  Context context(DefaultOptions());
  ASSERT_TRUE(context.ok());
  constexpr int64_t kHeads = 2, kDim = 5, kVDim = 3;
  for (PageLayout layout :
       {PageLayout::kNhd, PageLayout::kHnd, PageLayout::kGaps})
    for (int64_t page_size : {1, 3, 16}) {
      SCOPED_TRACE(std::string(PageLayoutName(layout)) + ", pages of " +
                   std::to_string(page_size));
      const int64_t tokens = 2 * page_size + 9,
                    pages = (2 * tokens + page_size - 1) / page_size;
      PagedCache cache(target, target, pages, page_size, kHeads, kDim, kVDim,
                       layout);
      // K rows token-major, V rows head-major: any strides are fine.
      NewRows k(source, tokens, kHeads, kDim, false),
          v(source, tokens, kHeads, kVDim, true);
      FillValues(k, static_cast<uint64_t>(page_size) * 7 + 1);
      FillValues(v, static_cast<uint64_t>(page_size) * 7 + 2);
      const std::vector<int64_t> slots = RandomSlots(
          tokens, pages * page_size, static_cast<uint64_t>(page_size));
      const std::vector<unsigned char> k_before = k.bytes, v_before = v.bytes;
      ASSERT_EQ(flashcpu_kv_append(context, &k.view, &v.view, slots.data(),
                                   &cache.view),
                FLASHCPU_OK)
          << flashcpu_last_error(context);
      EXPECT_STREQ(flashcpu_last_error(context), "");
      NewRows *sources[2] = {&k, &v};
      EXPECT_TRUE(PagesHold(cache, sources, slots));
      EXPECT_EQ(k.bytes, k_before) << "k_new was written";
      EXPECT_EQ(v.bytes, v_before) << "v_new was written";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, AppendRoundTrip,
    testing::Combine(testing::ValuesIn(kDtypes), testing::ValuesIn(kDtypes)),
    [](const testing::TestParamInfo<std::tuple<flashcpu_dtype, flashcpu_dtype>>
           &param_info) {
      return std::string(flashcpu_dtype_name(std::get<0>(param_info.param))) +
             "_into_" + flashcpu_dtype_name(std::get<1>(param_info.param));
    });

// K and V pages of different dtypes, from rows of a third.
TEST(AppendLayouts, KAndVPagesOfDifferentDtypes) {
  Context context(DefaultOptions());
  PagedCache cache(BF16, F16, 5, 3, 3, 8, 8, PageLayout::kHnd);
  NewRows k(F32, 9, 3, 8, false), v(F32, 9, 3, 8, false);
  FillValues(k, 5);
  FillValues(v, 6);
  const std::vector<int64_t> slots = RandomSlots(9, 15, 4);
  ASSERT_EQ(
      flashcpu_kv_append(context, &k.view, &v.view, slots.data(), &cache.view),
      FLASHCPU_OK)
      << flashcpu_last_error(context);
  NewRows *sources[2] = {&k, &v};
  EXPECT_TRUE(PagesHold(cache, sources, slots));
}

// K and V in one buffer, FlashInfer's [num_pages, 2, page_size, H, D]: v is
// k plus one K block, and both step over two blocks per page.
TEST(AppendLayouts, KAndVInOneBuffer) {
  Context context(DefaultOptions());
  constexpr int64_t kPages = 6, kPageSize = 4, kHeads = 2, kDim = 8,
                    kBlock = kPageSize * kHeads * kDim;
  std::vector<uint16_t> pool(static_cast<size_t>(kPages * 2 * kBlock), 0x5a5a);
  flashcpu_paged_kv kv = flashcpu_paged_kv_nhd(
      pool.data(), pool.data() + kBlock, F16, kPages, kPageSize, kHeads, kDim);
  kv.k_strides[0] = kv.v_strides[0] = 2 * kBlock;
  NewRows k(F16, 10, kHeads, kDim, false), v(F16, 10, kHeads, kDim, false);
  FillValues(k, 8);
  FillValues(v, 9);
  const std::vector<int64_t> slots = RandomSlots(10, kPages * kPageSize, 10);
  ASSERT_EQ(flashcpu_kv_append(context, &k.view, &v.view, slots.data(), &kv),
            FLASHCPU_OK)
      << flashcpu_last_error(context);
  std::vector<uint16_t> expected(pool.size(), 0x5a5a);
  for (int64_t t = 0; t < 10; t++) {
    const int64_t slot = slots[static_cast<size_t>(t)];
    if (slot < 0) continue;
    const int64_t page = slot / kPageSize, in_page = slot % kPageSize;
    for (int64_t h = 0; h < kHeads; h++)
      for (int64_t d = 0; d < kDim; d++) {
        const int64_t at =
            page * 2 * kBlock + in_page * kHeads * kDim + h * kDim + d;
        std::memcpy(&expected[static_cast<size_t>(at)], k.At(t, h, d), 2);
        std::memcpy(&expected[static_cast<size_t>(at + kBlock)], v.At(t, h, d),
                    2);
      }
  }
  EXPECT_EQ(pool, expected);
}

TEST(AppendLayouts, EverySlotSkippedWritesNothing) {
  Context context(DefaultOptions());
  PagedCache cache(F16, F16, 3, 3, 2, 4, 4, PageLayout::kNhd);
  NewRows k(F32, 4, 2, 4, false), v(F32, 4, 2, 4, false);
  FillValues(k, 1);
  FillValues(v, 2);
  const std::vector<int64_t> slots(4, -1);
  ASSERT_EQ(
      flashcpu_kv_append(context, &k.view, &v.view, slots.data(), &cache.view),
      FLASHCPU_OK)
      << flashcpu_last_error(context);
  NewRows *sources[2] = {&k, &v};
  EXPECT_TRUE(PagesHold(cache, sources, slots));
}

// Many rows (several tiles of the append's launch), with more threads.
TEST(AppendLayouts, ManyRowsAcrossThreadsLandInTheirSlots) {
  Context context(KernelOptions(FLASHCPU_ISA_AUTO, nullptr, 3));
  ASSERT_TRUE(context.ok());
  PagedCache cache(BF16, BF16, 40, 16, 4, 64, 64, PageLayout::kHnd);
  NewRows k(F32, 500, 4, 64, false), v(BF16, 500, 4, 64, true);
  FillValues(k, 3);
  FillValues(v, 4);
  const std::vector<int64_t> slots = RandomSlots(500, 640, 77);
  ASSERT_EQ(
      flashcpu_kv_append(context, &k.view, &v.view, slots.data(), &cache.view),
      FLASHCPU_OK)
      << flashcpu_last_error(context);
  NewRows *sources[2] = {&k, &v};
  EXPECT_TRUE(PagesHold(cache, sources, slots));
}

// ---------------------------------------------------------------------------
// Errors: a valid append (4 rows of f32 into f16 pages of 3 tokens, 4 pages,
// Hkv = 2, D = 8, Dv = 6) broken one way. The rows, the slots and the pages
// all live in one byte arena, so that a case can point a source into the
// pages and any write shows.
struct AppendCall {
  static constexpr int64_t kPages = 4, kPageSize = 3, kHeads = 2, kDim = 8,
                           kVDim = 6, kTokens = 4;
  static constexpr size_t kRegion = 4096; // bytes
  enum Region { kKPages, kVPages, kKRows, kVRows, kSlots, kRegionCount };

  AppendCall() : arena(kRegion * kRegionCount, kPoison) {
    flashcpu_context_create(nullptr, &ctx);
    kv = flashcpu_paged_kv_nhd(region(kKPages), region(kVPages), F16, kPages,
                               kPageSize, kHeads, kDim);
    kv.v_head_dim = kVDim;
    kv.v_strides[0] = kPageSize * kHeads * kVDim;
    kv.v_strides[1] = kHeads * kVDim;
    kv.v_strides[2] = kVDim;
    k_new = flashcpu_tensor_bshd(region(kKRows), F32, 1, kTokens, kHeads, kDim);
    v_new =
        flashcpu_tensor_bshd(region(kVRows), F32, 1, kTokens, kHeads, kVDim);
    float *k_values = reinterpret_cast<float *>(region(kKRows));
    float *v_values = reinterpret_cast<float *>(region(kVRows));
    for (int64_t e = 0; e < kTokens * kHeads * kDim; e++)
      k_values[e] = 0.25f * static_cast<float>(e % 7) - 0.5f;
    for (int64_t e = 0; e < kTokens * kHeads * kVDim; e++)
      v_values[e] = 0.5f - 0.125f * static_cast<float>(e % 5);
    slots = reinterpret_cast<int64_t *>(region(kSlots));
    const int64_t valid[kTokens] = {5, -1, 0, 11};
    std::memcpy(slots, valid, sizeof valid);
  }
  ~AppendCall() { flashcpu_context_destroy(ctx); }
  AppendCall(const AppendCall &) = delete;
  AppendCall &operator=(const AppendCall &) = delete;

  unsigned char *region(Region r) { return arena.data() + r * kRegion; }
  flashcpu_status Run() {
    return flashcpu_kv_append(ctx, &k_new, &v_new, slots, &kv);
  }

  flashcpu_context *ctx = nullptr;
  std::vector<unsigned char> arena;
  flashcpu_paged_kv kv;
  flashcpu_tensor k_new, v_new;
  int64_t *slots;
};

// SetRawDtype and kFloatCacheScales: paged_call.h.

TEST(AppendBaseline, ValidAppendWritesThePages) {
  AppendCall call;
  const std::vector<unsigned char> before = call.arena;
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_NE(call.arena, before);
  EXPECT_STREQ(flashcpu_last_error(call.ctx), "");
}

struct AppendErrorCase {
  std::string name;
  std::function<void(AppendCall &)> breaks;
  flashcpu_status status;
  std::vector<std::string> words; // each must appear as a whole word
};
void PrintTo(const AppendErrorCase &c, std::ostream *os) { *os << c.name; }

std::vector<AppendErrorCase> AppendErrorCases() {
  using C = AppendCall;
  constexpr flashcpu_status kNull = FLASHCPU_ERROR_NULL_POINTER,
                            kInvalid = FLASHCPU_ERROR_INVALID_ARGUMENT,
                            kShape = FLASHCPU_ERROR_SHAPE_MISMATCH,
                            kLayout = FLASHCPU_ERROR_BAD_LAYOUT,
                            kOverlap = FLASHCPU_ERROR_OVERLAP,
                            kDtype = FLASHCPU_ERROR_UNSUPPORTED_DTYPE;
  return {
      // Slots: -1 or 0 .. 11, each once.
      {"slot_equal_to_capacity",
       [](C &c) { c.slots[2] = 12; },
       kInvalid,
       {"slot_mapping[2]"}},
      {"slot_far_out_of_range",
       [](C &c) { c.slots[0] = int64_t{1} << 40; },
       kInvalid,
       {"slot_mapping[0]"}},
      {"slot_minus_two",
       [](C &c) { c.slots[1] = -2; },
       kInvalid,
       {"slot_mapping[1]"}},
      {"slot_most_negative",
       [](C &c) { c.slots[3] = INT64_MIN; },
       kInvalid,
       {"slot_mapping[3]"}},
      {"slot_twice",
       [](C &c) { c.slots[3] = 5; },
       kInvalid,
       {"slot_mapping[0]", "slot_mapping[3]"}},
      {"slot_twice_adjacent",
       [](C &c) { c.slots[1] = 0; },
       kInvalid,
       {"slot_mapping[1]", "slot_mapping[2]"}},
      {"slot_mapping_null",
       [](C &c) { c.slots = nullptr; },
       kNull,
       {"slot_mapping"}},
      // The rows against the cache and each other.
      {"k_new_batch_two",
       [](C &c) { c.k_new.dims[0] = 2; },
       kShape,
       {"k_new->dims[0]"}},
      {"k_new_heads_differ",
       [](C &c) { c.k_new.dims[2] = 1; },
       kShape,
       {"k_new->dims[2]"}},
      {"k_new_head_dim_differs",
       [](C &c) { c.k_new.dims[3] = 6; },
       kShape,
       {"k_new->dims[3]"}},
      {"v_new_rows_differ",
       [](C &c) { c.v_new.dims[1] = 3; },
       kShape,
       {"v_new->dims[1]"}},
      {"v_new_heads_differ",
       [](C &c) { c.v_new.dims[2] = 4; },
       kShape,
       {"v_new->dims[2]"}},
      {"v_new_head_dim_is_k_s",
       [](C &c) { c.v_new.dims[3] = 8; },
       kShape,
       {"v_new->dims[3]"}},
      {"k_new_data_null",
       [](C &c) { c.k_new.data = nullptr; },
       kNull,
       {"k_new->data"}},
      {"v_new_dtype_unknown",
       [](C &c) { SetRawDtype(&c.v_new.dtype, 7); },
       kDtype,
       {"v_new->dtype"}},
      {"k_new_head_dim_strided",
       [](C &c) { c.k_new.strides[3] = 2; },
       kLayout,
       {"k_new->strides[3]"}},
      {"v_new_negative_stride",
       [](C &c) { c.v_new.strides[1] = -12; },
       kLayout,
       {"v_new->strides[1]"}},
      // Sources overlapping the pages they go to.
      {"k_new_inside_k_pages",
       [](C &c) { c.k_new.data = c.region(C::kKPages) + 64; },
       kOverlap,
       {"k_new", "K"}},
      {"v_new_inside_v_pages",
       [](C &c) { c.v_new.data = c.region(C::kVPages) + 4; },
       kOverlap,
       {"v_new", "V"}},
      {"k_new_ends_in_v_pages",
       [](C &c) { c.k_new.data = c.region(C::kVPages) - 200; },
       kOverlap,
       {"k_new", "V"}},
      {"slot_mapping_inside_k_pages",
       [](C &c) {
         int64_t *moved =
             reinterpret_cast<int64_t *>(c.region(C::kKPages) + 32);
         std::memcpy(moved, c.slots, 4 * sizeof(int64_t));
         c.slots = moved;
       },
       kOverlap,
       {"slot_mapping", "K"}},
      // The cache view.
      {"kv_k_null", [](C &c) { c.kv.k = nullptr; }, kNull, {"kv->k"}},
      {"kv_v_dtype_unknown",
       [](C &c) { SetRawDtype(&c.kv.v_dtype, 8); },
       kDtype,
       {"kv->v_dtype"}},
      {"kv_k_negative_slot_stride",
       [](C &c) { c.kv.k_strides[1] = -16; },
       kLayout,
       {"kv->k_strides[1]"}},
      {"kv_v_scales_of_a_float_cache",
       [](C &c) { c.kv.v_scales = &kFloatCacheScales; },
       kInvalid,
       {"kv->v_scales"}},
      {"kv_page_size_zero",
       [](C &c) { c.kv.page_size = 0; },
       kInvalid,
       {"page_size"}},
      {"kv_num_pages_negative",
       [](C &c) { c.kv.num_pages = -1; },
       kInvalid,
       {"num_pages"}},
  };
}

class AppendErrors : public testing::TestWithParam<AppendErrorCase> {};

TEST_P(AppendErrors, RejectedWithStatusMessageAndPagesUnchanged) {
  const AppendErrorCase &c = GetParam();
  AppendCall call;
  c.breaks(call);
  const std::vector<unsigned char> before = call.arena;
  const flashcpu_status status = call.Run();
  EXPECT_EQ(status, c.status) << "got " << flashcpu_status_name(status) << ": "
                              << flashcpu_last_error(call.ctx);
  const std::string message = flashcpu_last_error(call.ctx);
  for (const std::string &word : c.words)
    EXPECT_TRUE(ContainsWord(message, word))
        << "message \"" << message << "\" lacks \"" << word << "\"";
  EXPECT_EQ(call.arena, before) << "a rejected append wrote something";
}

INSTANTIATE_TEST_SUITE_P(
    Append, AppendErrors, testing::ValuesIn(AppendErrorCases()),
    [](const testing::TestParamInfo<AppendErrorCase> &param_info) {
      return param_info.param.name;
    });

TEST(AppendErrorsMore, NullArgumentsAreNamed) {
  AppendCall call;
  const std::vector<unsigned char> before = call.arena;
  EXPECT_EQ(
      flashcpu_kv_append(call.ctx, nullptr, &call.v_new, call.slots, &call.kv),
      FLASHCPU_ERROR_NULL_POINTER);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "k_new"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(
      flashcpu_kv_append(call.ctx, &call.k_new, nullptr, call.slots, &call.kv),
      FLASHCPU_ERROR_NULL_POINTER);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "v_new"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_kv_append(call.ctx, &call.k_new, &call.v_new, call.slots,
                               nullptr),
            FLASHCPU_ERROR_NULL_POINTER);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "kv"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_kv_append(nullptr, &call.k_new, &call.v_new, call.slots,
                               &call.kv),
            FLASHCPU_ERROR_NULL_POINTER);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(nullptr), "ctx"))
      << flashcpu_last_error(nullptr);
  EXPECT_EQ(call.arena, before);
}

// A duplicate far apart among many rows: the message names both rows.
TEST(AppendErrorsMore, DuplicateAmongManyRowsNamesBothIndices) {
  Context context(DefaultOptions());
  PagedCache cache(F32, F32, 30, 16, 1, 4, 4, PageLayout::kNhd);
  NewRows k(F32, 300, 1, 4, false), v(F32, 300, 1, 4, false);
  std::vector<int64_t> slots(300);
  std::iota(slots.begin(), slots.end(), 100);
  slots[290] = slots[7];
  const std::vector<unsigned char> k_before = cache.bytes[0],
                                   v_before = cache.bytes[1];
  EXPECT_EQ(
      flashcpu_kv_append(context, &k.view, &v.view, slots.data(), &cache.view),
      FLASHCPU_ERROR_INVALID_ARGUMENT);
  const std::string message = flashcpu_last_error(context);
  EXPECT_TRUE(ContainsWord(message, "slot_mapping[7]")) << message;
  EXPECT_TRUE(ContainsWord(message, "slot_mapping[290]")) << message;
  EXPECT_EQ(cache.bytes[0], k_before);
  EXPECT_EQ(cache.bytes[1], v_before);
}

// No rows: nothing to write and nothing to map; slot_mapping may be NULL.
TEST(AppendErrorsMore, NoRowsIsOkAndWritesNothing) {
  AppendCall call;
  call.k_new.dims[1] = call.v_new.dims[1] = 0;
  const std::vector<unsigned char> before = call.arena;
  EXPECT_EQ(
      flashcpu_kv_append(call.ctx, &call.k_new, &call.v_new, nullptr, &call.kv),
      FLASHCPU_OK)
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(call.arena, before);
  call.slots[0] = -77; // not read either
  EXPECT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_EQ(call.arena.size(), before.size());
  EXPECT_EQ(std::memcmp(call.arena.data(), before.data(),
                        AppendCall::kSlots * AppendCall::kRegion),
            0);
}

// Per-token scales into quantized pages are computed as flashcpu_quantize
// computes them: a token of tiny values (about 1e-7) with f16 scales keeps
// a scale that holds it, not one rounded to 0 that reads it back as zeros
// (U8: NaN). Read back through flashcpu_dequantize over the pages, every
// value is within half a step of its code grid.
TEST(AppendQuantized, TinyTokensKeepAScaleThatHoldsThem) {
  constexpr int64_t kPages = 2, kPage = 4, kHeads = 2, kDim = 32, kTokens = 3;
  const int64_t slots[kTokens] = {5, 0, 2};
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  for (flashcpu_dtype dtype :
       {FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_U8, FLASHCPU_DTYPE_F8_E4M3,
        FLASHCPU_DTYPE_F8_E5M2}) {
    Rng rng(31);
    std::vector<float> rows(static_cast<size_t>(kTokens * kHeads * kDim));
    for (size_t r = 0; r < rows.size() / kDim; r++)
      for (size_t d = 0; d < kDim; d++)
        rows[r * kDim + d] = static_cast<float>(
            d == 0 ? 1e-7 * (1.0 + 0.25 * static_cast<double>(r))
                   : rng.Uniform(-1e-7, 1e-7));
    const int64_t cells = kPages * kPage * kHeads;
    std::vector<unsigned char> pages[2];
    std::vector<uint16_t> scales[2], zeros[2];
    flashcpu_kv_scales views[2];
    for (int side = 0; side < 2; side++) {
      pages[side].assign(static_cast<size_t>(cells * kDim), kPoison);
      scales[side].assign(static_cast<size_t>(cells), 0x7e00);
      zeros[side].assign(static_cast<size_t>(cells), 0x7e00);
      views[side] = flashcpu_kv_scales{
          scales[side].data(),
          F16,
          {kPage * kHeads, kHeads, 1, 0},
          dtype == FLASHCPU_DTYPE_U8 ? zeros[side].data() : nullptr};
    }
    flashcpu_paged_kv cache = flashcpu_paged_kv_nhd(
        pages[0].data(), pages[1].data(), dtype, kPages, kPage, kHeads, kDim);
    cache.k_scales = &views[0];
    cache.v_scales = &views[1];
    const flashcpu_tensor k_new =
        flashcpu_tensor_bshd(rows.data(), F32, 1, kTokens, kHeads, kDim);
    ASSERT_EQ(flashcpu_kv_append(ctx, &k_new, &k_new, slots, &cache),
              FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    for (int side = 0; side < 2; side++) {
      // The pages as a [pages, page, heads, dim] tensor.
      const flashcpu_tensor quantized = flashcpu_tensor_bshd(
          pages[side].data(), dtype, kPages, kPage, kHeads, kDim);
      std::vector<float> back(static_cast<size_t>(cells * kDim));
      const flashcpu_tensor values =
          flashcpu_tensor_bshd(back.data(), F32, kPages, kPage, kHeads, kDim);
      ASSERT_EQ(flashcpu_dequantize(ctx, &quantized, &views[side], &values),
                FLASHCPU_OK)
          << flashcpu_last_error(ctx);
      for (int64_t t = 0; t < kTokens; t++)
        for (int64_t h = 0; h < kHeads; h++) {
          const size_t cell = static_cast<size_t>(slots[t] * kHeads + h),
                       row = static_cast<size_t>(t * kHeads + h);
          const double scale = DecodeHalf(scales[side][cell]);
          ASSERT_GT(scale, 0.0)
              << flashcpu_dtype_name(dtype) << " token " << t << " head " << h;
          double low = INFINITY;
          for (size_t d = 0; d < kDim; d++)
            low = std::min(low, static_cast<double>(rows[row * kDim + d]));
          const double zero_error =
              dtype == FLASHCPU_DTYPE_U8
                  ? std::fabs(DecodeHalf(zeros[side][cell]) + low / scale)
                  : 0;
          for (size_t d = 0; d < kDim; d++) {
            const double x = rows[row * kDim + d], got = back[cell * kDim + d];
            double half_step = scale / 2; // I8
            if (dtype == FLASHCPU_DTYPE_U8)
              half_step = scale * (0.5 + zero_error);
            if (dtype == FLASHCPU_DTYPE_F8_E4M3)
              half_step = std::fabs(x) / 16 + scale * 0x1p-10;
            if (dtype == FLASHCPU_DTYPE_F8_E5M2)
              half_step = std::fabs(x) / 8 + scale * 0x1p-17;
            ASSERT_LE(std::fabs(got - x), half_step * (1 + 1e-6))
                << flashcpu_dtype_name(dtype) << " token " << t << " head " << h
                << " d " << d << ": " << x << " -> " << got << " with scale "
                << scale;
          }
        }
    }
  }
  flashcpu_context_destroy(ctx);
}

// ---------------------------------------------------------------------------
// End to end: appends fill pages that attention then reads.

// Three requests sharing a pool of pages in random order, 37, 0 and 20
// tokens long, their K and V also kept contiguous ([R, capacity, Hkv, D]).
struct Sequences {
  static constexpr int64_t kRequests = 3, kCapacity = 37, kQHeads = 4,
                           kKvHeads = 2, kDim = 16, kPageSize = 3,
                           kRowPages = (kCapacity + kPageSize - 1) / kPageSize,
                           kPages = 3 * kRowPages;
  const int64_t lengths[kRequests] = {37, 0, 20};

  explicit Sequences(flashcpu_dtype kv_dtype)
      : dtype(kv_dtype),
        k(static_cast<size_t>(kRequests * kCapacity * kKvHeads * kDim) *
          ElementBytes(kv_dtype)),
        v(k.size()) {
    Rng rng(2024);
    for (int64_t r = 0; r < kRequests; r++)
      for (int64_t j = 0; j < kCapacity; j++)
        for (int64_t e = 0; e < kKvHeads * kDim; e++) {
          // Rows past a request's length are never read: NaN shows if they are.
          const bool used = j < lengths[r];
          StoreAs(KRow(r, j) + e * size(), dtype,
                  used ? rng.NonZeroUnit() : NAN);
          StoreAs(VRow(r, j) + e * size(), dtype,
                  used ? rng.NonZeroUnit() : NAN);
        }
    std::vector<int32_t> pages(kPages);
    std::iota(pages.begin(), pages.end(), 0);
    for (size_t i = pages.size(); i > 1; i--)
      std::swap(pages[i - 1],
                pages[static_cast<size_t>(rng.Below(static_cast<int64_t>(i)))]);
    block_table = pages; // row r: entries r * kRowPages ..
  }
  int64_t size() const { return static_cast<int64_t>(ElementBytes(dtype)); }
  unsigned char *KRow(int64_t r, int64_t j) {
    return k.data() + ((r * kCapacity + j) * kKvHeads * kDim) * size();
  }
  unsigned char *VRow(int64_t r, int64_t j) {
    return v.data() + ((r * kCapacity + j) * kKvHeads * kDim) * size();
  }
  int64_t Slot(int64_t r, int64_t j) const {
    return block_table[static_cast<size_t>(r * kRowPages + j / kPageSize)] *
               kPageSize +
           j % kPageSize;
  }
  PagedCache EmptyCache() const {
    return PagedCache(dtype, dtype, kPages, kPageSize, kKvHeads, kDim, kDim,
                      PageLayout::kHnd);
  }

  flashcpu_dtype dtype;
  std::vector<unsigned char> k, v;
  std::vector<int32_t> block_table;
};

// Decode steps: step t appends token t of every request still that long,
// packed into one call as an engine would.
void AppendTokenByToken(flashcpu_context *ctx, Sequences &s,
                        PagedCache &cache) {
  for (int64_t t = 0; t < Sequences::kCapacity; t++) {
    std::vector<int64_t> active;
    for (int64_t r = 0; r < Sequences::kRequests; r++)
      if (t < s.lengths[r]) active.push_back(r);
    const int64_t n = static_cast<int64_t>(active.size());
    NewRows k(s.dtype, n, Sequences::kKvHeads, Sequences::kDim, false),
        v(s.dtype, n, Sequences::kKvHeads, Sequences::kDim, false);
    std::vector<int64_t> slots;
    const size_t row_bytes =
        static_cast<size_t>(Sequences::kKvHeads * Sequences::kDim * s.size());
    for (int64_t i = 0; i < n; i++) {
      std::memcpy(k.At(i, 0, 0), s.KRow(active[static_cast<size_t>(i)], t),
                  row_bytes);
      std::memcpy(v.At(i, 0, 0), s.VRow(active[static_cast<size_t>(i)], t),
                  row_bytes);
      slots.push_back(s.Slot(active[static_cast<size_t>(i)], t));
    }
    ASSERT_EQ(
        flashcpu_kv_append(ctx, &k.view, &v.view, slots.data(), &cache.view),
        FLASHCPU_OK)
        << "step " << t << ": " << flashcpu_last_error(ctx);
  }
}

// Prefill: each request's tokens in chunks of `chunk`, read in place from
// the contiguous K/V.
void AppendInChunks(flashcpu_context *ctx, Sequences &s, PagedCache &cache,
                    int64_t chunk) {
  for (int64_t r = 0; r < Sequences::kRequests; r++)
    for (int64_t start = 0; start < std::max<int64_t>(s.lengths[r], 1);
         start += chunk) {
      const int64_t n =
          std::min(chunk, s.lengths[r] - start); // 0 for the empty request
      flashcpu_tensor k =
          flashcpu_tensor_bshd(s.KRow(r, start), s.dtype, 1, n,
                               Sequences::kKvHeads, Sequences::kDim);
      flashcpu_tensor v =
          flashcpu_tensor_bshd(s.VRow(r, start), s.dtype, 1, n,
                               Sequences::kKvHeads, Sequences::kDim);
      std::vector<int64_t> slots;
      for (int64_t j = start; j < start + n; j++) slots.push_back(s.Slot(r, j));
      ASSERT_EQ(flashcpu_kv_append(ctx, &k, &v, n ? slots.data() : nullptr,
                                   &cache.view),
                FLASHCPU_OK)
          << "request " << r << " from " << start << ": "
          << flashcpu_last_error(ctx);
    }
}

TEST(AppendEndToEnd, TokenByTokenAndChunksFillTheSamePages) {
  Context context(DefaultOptions());
  for (flashcpu_dtype dtype : kDtypes) {
    SCOPED_TRACE(flashcpu_dtype_name(dtype));
    Sequences s(dtype);
    PagedCache decoded = s.EmptyCache(), prefilled = s.EmptyCache(),
               chunked = s.EmptyCache();
    AppendTokenByToken(context, s, decoded);
    AppendInChunks(context, s, prefilled, Sequences::kCapacity);
    AppendInChunks(context, s, chunked, 7);
    for (int side = 0; side < 2; side++) {
      EXPECT_EQ(decoded.bytes[side], prefilled.bytes[side]) << "side " << side;
      EXPECT_EQ(chunked.bytes[side], prefilled.bytes[side]) << "side " << side;
    }
    // Each token's rows are the contiguous rows, bit for bit.
    for (int64_t r = 0; r < Sequences::kRequests; r++)
      for (int64_t j = 0; j < s.lengths[r]; j++)
        for (int64_t h = 0; h < Sequences::kKvHeads; h++) {
          const size_t row = static_cast<size_t>(Sequences::kDim * s.size());
          ASSERT_EQ(
              std::memcmp(
                  &decoded.bytes[0][decoded.Offset(0, s.Slot(r, j), h, 0)],
                  s.KRow(r, j) + h * Sequences::kDim * s.size(), row),
              0)
              << "K of request " << r << " token " << j << " head " << h;
          ASSERT_EQ(
              std::memcmp(
                  &decoded.bytes[1][decoded.Offset(1, s.Slot(r, j), h, 0)],
                  s.VRow(r, j) + h * Sequences::kDim * s.size(), row),
              0)
              << "V of request " << r << " token " << j << " head " << h;
        }
  }
}

// The kernels this CPU runs, by name, then nullptr: the context's own choice.
std::vector<const char *> KernelsToForce() {
  std::vector<const char *> names;
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++)
    if (info.runnable) names.push_back(info.name);
  names.push_back(nullptr);
  return names;
}

struct StepOptions {
  const char *name;
  int64_t rows; // L of every request
  bool every_option;
};

// Attention over the appended pages with a plan of R requests of L rows
// each equals flashcpu_attention on the contiguous K/V with kv_lengths (the
// same problem), byte for byte, with the same kernel.
TEST(AppendEndToEnd, AttentionOverAppendedPagesEqualsContiguousAttention) {
  constexpr int64_t R = Sequences::kRequests, Hq = Sequences::kQHeads,
                    D = Sequences::kDim;
  const StepOptions steps[] = {{"decode", 1, false},
                               {"verify", 5, false},
                               {"prefill", 20, false},
                               {"verify_every_option", 5, true},
                               {"prefill_every_option", 20, true}};
  struct Dtypes {
    flashcpu_dtype q, kv, out;
  };
  // One context per kernel, made once (a context starts threads).
  std::vector<const char *> kernels = KernelsToForce();
  std::vector<Context> contexts;
  for (const char *kernel : kernels) {
    contexts.emplace_back(KernelOptions(FLASHCPU_ISA_AUTO, kernel));
    ASSERT_TRUE(contexts.back().ok()) << (kernel ? kernel : "default") << ": "
                                      << flashcpu_last_error(nullptr);
  }
  for (const Dtypes &dtypes : {Dtypes{F32, F32, F32}, Dtypes{BF16, BF16, F16},
                               Dtypes{F16, F16, BF16}}) {
    Sequences s(dtypes.kv);
    PagedCache cache = s.EmptyCache();
    AppendTokenByToken(contexts.back(), s, cache);
    const int64_t kv_lengths[R] = {s.lengths[0], s.lengths[1], s.lengths[2]};
    const int32_t seq_lens[R] = {static_cast<int32_t>(s.lengths[0]),
                                 static_cast<int32_t>(s.lengths[1]),
                                 static_cast<int32_t>(s.lengths[2])};
    for (const StepOptions &step : steps) {
      const int64_t L = step.rows, T = R * L;
      // Packed q [1, T, Hq, D] is the same buffer as [R, L, Hq, D] BSHD.
      std::vector<unsigned char> q_bytes(static_cast<size_t>(T * Hq * D) *
                                         ElementBytes(dtypes.q));
      Rng rng(static_cast<uint64_t>(L) * 31 + dtypes.q);
      for (int64_t e = 0; e < T * Hq * D; e++)
        StoreAs(q_bytes.data() +
                    e * static_cast<int64_t>(ElementBytes(dtypes.q)),
                dtypes.q, rng.NonZeroUnit());
      const flashcpu_tensor q_packed =
          flashcpu_tensor_bshd(q_bytes.data(), dtypes.q, 1, T, Hq, D);
      const flashcpu_tensor q_batched =
          flashcpu_tensor_bshd(q_bytes.data(), dtypes.q, R, L, Hq, D);
      const flashcpu_tensor k = flashcpu_tensor_bshd(
          s.k.data(), s.dtype, R, Sequences::kCapacity, Sequences::kKvHeads, D);
      const flashcpu_tensor v = flashcpu_tensor_bshd(
          s.v.data(), s.dtype, R, Sequences::kCapacity, Sequences::kKvHeads, D);

      // Options: causal, and for every_option a window, softcap, sinks,
      // [R, Hq] ALiBi slopes and an additive mask (rows of [Hq, T, S]: the
      // contiguous call sees them through a batch stride of L rows).
      std::vector<uint16_t> sinks(Hq);
      std::vector<float> slopes(R * (Hq + 1)),
          additive(static_cast<size_t>(Hq * T * Sequences::kCapacity));
      for (uint16_t &sink : sinks)
        sink = EncodeBfloat16(rng.Uniform(-1.0, 2.0));
      for (float &slope : slopes)
        slope = static_cast<float>(rng.Uniform(0.01, 0.3));
      for (float &value : additive)
        value = rng.Chance(0.1) ? -INFINITY
                                : static_cast<float>(rng.Uniform(-1.0, 1.0));
      flashcpu_additive_mask packed_mask{
          additive.data(),
          {0, T * Sequences::kCapacity, Sequences::kCapacity, 1}};
      flashcpu_additive_mask batched_mask{additive.data(),
                                          {L * Sequences::kCapacity,
                                           T * Sequences::kCapacity,
                                           Sequences::kCapacity, 1}};
      flashcpu_attention_params paged_params, contiguous_params;
      flashcpu_attention_params_init(&paged_params);
      paged_params.flags = L > 1 ? FLASHCPU_FLAG_CAUSAL : 0u;
      if (step.every_option) {
        paged_params.window_left = 9;
        paged_params.window_right = 0;
        paged_params.softcap = 15.0f;
        paged_params.sinks = sinks.data();
        paged_params.sinks_dtype = BF16;
        paged_params.alibi_slopes = slopes.data();
        paged_params.alibi_batch_stride = Hq + 1;
      }
      contiguous_params = paged_params;
      contiguous_params.kv_lengths = kv_lengths;
      if (step.every_option) {
        paged_params.additive_mask = &packed_mask;
        contiguous_params.additive_mask = &batched_mask;
      }

      flashcpu_batch batch;
      flashcpu_batch_init(&batch);
      std::vector<int32_t> cu(R + 1);
      for (int64_t r = 0; r <= R; r++)
        cu[static_cast<size_t>(r)] = static_cast<int32_t>(r * L);
      batch.num_requests = R;
      batch.cu_seqlens_q = cu.data();
      batch.seq_lens_kv = seq_lens;
      batch.block_table = s.block_table.data();
      batch.block_table_stride = Sequences::kRowPages;

      const size_t out_bytes =
          static_cast<size_t>(T * Hq * D) * ElementBytes(dtypes.out);
      int compared = 0; // kernels that took the step
      for (size_t which = 0; which < kernels.size(); which++) {
        const char *kernel = kernels[which];
        SCOPED_TRACE(std::string(step.name) + " q " +
                     flashcpu_dtype_name(dtypes.q) + " kv " +
                     flashcpu_dtype_name(dtypes.kv) + " out " +
                     flashcpu_dtype_name(dtypes.out) + " on " +
                     (kernel ? kernel : "the default choice"));
        flashcpu_context *context = contexts[which];
        std::vector<unsigned char> contiguous_out(out_bytes, 0xee),
            paged_out(out_bytes, 0xdd);
        std::vector<float> contiguous_lse(static_cast<size_t>(T * Hq), 1.0f),
            paged_lse(contiguous_lse.size(), 2.0f);
        const flashcpu_tensor out_batched = flashcpu_tensor_bshd(
            contiguous_out.data(), dtypes.out, R, L, Hq, D);
        const flashcpu_tensor out_packed =
            flashcpu_tensor_bshd(paged_out.data(), dtypes.out, 1, T, Hq, D);
        const flashcpu_status contiguous_status =
            flashcpu_attention(context, &q_batched, &k, &v, &out_batched,
                               contiguous_lse.data(), &contiguous_params);
        if (kernel && contiguous_status == FLASHCPU_ERROR_INVALID_ARGUMENT)
          continue; // the kernel does not take it
        ASSERT_EQ(contiguous_status, FLASHCPU_OK)
            << flashcpu_last_error(context);
        flashcpu_plan *plan = nullptr;
        ASSERT_EQ(flashcpu_plan_create(context, &batch, Hq, &cache.view, &plan),
                  FLASHCPU_OK)
            << flashcpu_last_error(context);
        const flashcpu_status paged_status = flashcpu_attention_paged(
            context, plan, &q_packed, &cache.view, &out_packed,
            paged_lse.data(), &paged_params);
        flashcpu_plan_destroy(plan);
        ASSERT_EQ(paged_status, FLASHCPU_OK) << flashcpu_last_error(context);
        EXPECT_EQ(paged_out, contiguous_out);
        // lse: [Hq, T] packed, [R, Hq, L] contiguous.
        int64_t lse_mismatches = 0;
        for (int64_t r = 0; r < R; r++)
          for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < L; i++)
              lse_mismatches +=
                  std::memcmp(
                      &paged_lse[static_cast<size_t>(h * T + r * L + i)],
                      &contiguous_lse[static_cast<size_t>((r * Hq + h) * L +
                                                          i)],
                      sizeof(float)) != 0;
        EXPECT_EQ(lse_mismatches, 0);
        compared++;
      }
      // The default choice and at least one forced kernel: a catch-all row.
      EXPECT_GE(compared, 2) << step.name;
    }
  }
}

} // namespace
} // namespace fctest
