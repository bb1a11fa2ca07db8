// flashcpu_kv_append, through the public API:
//  - round trips: rows of each dtype into caches of each dtype (NHD, HND and
//    a layout with gaps between rows; pages of 1, 3 and 16 tokens) read back
//    as the conversion rounds them (to nearest even), the same dtype bit for
//    bit, NaN payloads included; slot -1 skips a row; every other byte of
//    the pages stays as it was;
//  - errors: each case breaks one thing and expects the status, a message
//    naming the argument and index, and the pages unchanged.
// kv_append_end_to_end_test.cpp: appends that attention then reads.
#include "kv_append_support.h"

namespace fctest {
using namespace kv_append;
namespace {

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

} // namespace
} // namespace fctest
