// The paged API's argument checking and the plan's lifecycle, through the
// public API:
//  - flashcpu_plan_create and flashcpu_attention_paged: each case breaks one
//    thing in an otherwise valid step (PagedCall) and expects the exact
//    status, a message naming the argument and the offending index, no plan
//    (*plan NULL), and no byte of out, lse, the pages, q or the batch's
//    arrays changed (they all live in poisoned arenas compared byte for
//    byte);
//  - the new attention options (sinks, ALiBi) on flashcpu_attention too.
// The plan's lifecycle is plan_lifecycle_test.cpp; the valid step both
// start from is paged_call.h.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bad_call.h"
#include "fixtures.h"
#include "paged_call.h"
#include "test_tensor.h"

namespace fctest {
namespace {

// The unbroken step must succeed, or no case below proves anything.
TEST(PagedCallBaseline, ValidStepPlansRunsAndWritesEveryOutputRow) {
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_STREQ(flashcpu_last_error(call.ctx), "");
  uint32_t pattern;
  std::memset(&pattern, 0x3c, sizeof pattern);
  const float *out = call.region(PagedCall::kOut);
  for (int64_t e = 0;
       e < PagedCall::kTokens * PagedCall::kQHeads * PagedCall::kHeadDim; e++)
    EXPECT_NE(std::memcmp(&out[e], &pattern, sizeof pattern), 0)
        << "out element " << e << " unwritten";
  for (int64_t e = 0; e < PagedCall::kTokens * PagedCall::kQHeads; e++)
    EXPECT_TRUE(std::isfinite(call.lse[e])) << "lse " << e;
}

TEST(PagedCallBaseline, ValidStepWithBlockOffsetsSucceeds) {
  PagedCall call;
  call.UseBlockOffsets();
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
}

// ---------------------------------------------------------------------------
// flashcpu_plan_create's checks.

struct PlanErrorCase {
  std::string name;
  std::function<void(PagedCall &)> breaks;
  flashcpu_status status;
  std::vector<std::string> words; // each must appear as a whole word
};

std::vector<PlanErrorCase> PlanErrorCases() {
  std::vector<PlanErrorCase> cases = {
      // Block-table rows of block_table_stride: request 0 reads entries 0
      // and 1, request 1 entries 3 and 4, request 2 entry 6.
      {"page_equal_to_num_pages",
       [](PagedCall &c) { c.block_table[4] = 6; },
       kInvalid,
       {"block_table[4]", "request 1"}},
      {"page_far_out_of_range",
       [](PagedCall &c) { c.block_table[6] = 1 << 30; },
       kInvalid,
       {"block_table[6]", "request 2"}},
      {"negative_page",
       [](PagedCall &c) { c.block_table[0] = -1; },
       kInvalid,
       {"block_table[0]", "request 0"}},
      {"block_table_stride_negative",
       [](PagedCall &c) { c.batch.block_table_stride = -3; },
       kInvalid,
       {"block_table_stride"}},
      // Request 1's 13 keys need 4 pages; its row has 3.
      {"seq_len_beyond_the_row",
       [](PagedCall &c) { c.seq_lens_kv[1] = 13; },
       kInvalid,
       {"seq_lens_kv[1]", "request 1"}},
      {"negative_seq_len",
       [](PagedCall &c) { c.seq_lens_kv[2] = -1; },
       kInvalid,
       {"seq_lens_kv[2]"}},
      {"cu_seqlens_q_not_starting_at_zero",
       [](PagedCall &c) { c.cu_seqlens_q[0] = 1; },
       kInvalid,
       {"cu_seqlens_q[0]"}},
      {"cu_seqlens_q_decreasing",
       [](PagedCall &c) { c.cu_seqlens_q[2] = 0; },
       kInvalid,
       {"cu_seqlens_q[2]"}},
      {"num_requests_zero",
       [](PagedCall &c) { c.batch.num_requests = 0; },
       kInvalid,
       {"num_requests"}},
      {"num_requests_negative",
       [](PagedCall &c) { c.batch.num_requests = -2; },
       kInvalid,
       {"num_requests"}},
      {"struct_size_zero",
       [](PagedCall &c) { c.batch.struct_size = 0; },
       kInvalid,
       {"struct_size"}},
      {"struct_size_larger",
       [](PagedCall &c) { c.batch.struct_size = sizeof(flashcpu_batch) + 8; },
       kInvalid,
       {"struct_size"}},
      {"cu_seqlens_q_null",
       [](PagedCall &c) { c.batch.cu_seqlens_q = nullptr; },
       kNull,
       {"cu_seqlens_q"}},
      {"seq_lens_kv_null",
       [](PagedCall &c) { c.batch.seq_lens_kv = nullptr; },
       kNull,
       {"seq_lens_kv"}},
      {"block_table_null",
       [](PagedCall &c) { c.batch.block_table = nullptr; },
       kNull,
       {"block_table"}},
      // Tree masks.
      {"tree_num_keys_beyond_seq_len",
       [](PagedCall &c) { c.tree_num_keys[1] = 8; },
       kInvalid,
       {"tree_num_keys[1]"}},
      {"tree_num_keys_negative",
       [](PagedCall &c) { c.tree_num_keys[0] = -1; },
       kInvalid,
       {"tree_num_keys[0]"}},
      {"tree_mask_without_tree_num_keys",
       [](PagedCall &c) { c.batch.tree_num_keys = nullptr; },
       kNull,
       {"tree_mask", "tree_num_keys"}},
      {"tree_num_keys_without_tree_mask",
       [](PagedCall &c) { c.batch.tree_mask = nullptr; },
       kNull,
       {"tree_mask", "tree_num_keys"}},
      {"tree_row_stride_too_small",
       [](PagedCall &c) { c.tree.row_stride = 0; },
       kInvalid,
       {"tree_mask", "row_stride"}},
      {"tree_num_keys_beyond_the_masks",
       [](PagedCall &c) { c.tree.num_keys = 2; },
       kInvalid,
       {"tree_num_keys[1]", "tree_mask->num_keys"}},
      {"tree_mask_rows_are_not_the_steps",
       [](PagedCall &c) { c.tree.num_rows = PagedCall::kTokens - 1; },
       kInvalid,
       {"tree_mask", "num_rows"}},
      {"tree_mask_with_a_batch_stride",
       [](PagedCall &c) { c.tree.batch_stride = 1; },
       kInvalid,
       {"tree_mask", "batch_stride"}},
      {"tree_mask_bits_null",
       [](PagedCall &c) { c.tree.bits = nullptr; },
       kNull,
       {"tree_mask->bits"}},
      // The cache description.
      {"paged_kv_struct_size_unset",
       [](PagedCall &c) { c.kv.struct_size = 0; },
       kInvalid,
       {"kv->struct_size", "flashcpu_paged_kv_init"}},
      // q_heads against the cache.
      {"q_heads_not_a_multiple",
       [](PagedCall &c) { c.q_heads = 3; },
       kShape,
       {"q_heads"}},
      {"q_heads_zero",
       [](PagedCall &c) { c.q_heads = 0; },
       kShape,
       {"q_heads"}},
  };
  // Block-table rows through block_offsets (indptr): request r's pages are
  // entries offsets[r] .. offsets[r + 1] - 1.
  cases.push_back({"offsets_page_out_of_range",
                   [](PagedCall &c) {
                     c.UseBlockOffsets();
                     c.block_table[3] = 6;
                   },
                   kInvalid,
                   {"block_table[3]", "request 1"}});
  cases.push_back({"offsets_negative_page",
                   [](PagedCall &c) {
                     c.UseBlockOffsets();
                     c.block_table[4] = -5;
                   },
                   kInvalid,
                   {"block_table[4]", "request 2"}});
  cases.push_back({"offsets_decreasing",
                   [](PagedCall &c) {
                     c.UseBlockOffsets();
                     c.block_offsets[2] = 1;
                   },
                   kInvalid,
                   {"block_offsets[1 .. 2]"}});
  cases.push_back({"offsets_negative",
                   [](PagedCall &c) {
                     c.UseBlockOffsets();
                     c.block_offsets[0] = -1;
                   },
                   kInvalid,
                   {"block_offsets[0 .. 1]"}});
  // Request 1 has 2 entries (offsets 2 .. 4) but 9 keys need 3 pages.
  cases.push_back({"offsets_seq_len_beyond_the_range",
                   [](PagedCall &c) {
                     c.UseBlockOffsets();
                     c.seq_lens_kv[1] = 9;
                   },
                   kInvalid,
                   {"seq_lens_kv[1]", "request 1"}});
  // Bad cache geometry (its data is not read by plan_create).
  for (const char *field :
       {"num_pages", "page_size", "kv_heads", "head_dim", "v_head_dim"})
    for (int64_t value : {int64_t{0}, int64_t{-4}}) {
      const std::string name = field;
      cases.push_back({name + (value == 0 ? "_zero" : "_negative"),
                       [name, value](PagedCall &c) {
                         if (name == "num_pages") c.kv.num_pages = value;
                         if (name == "page_size") c.kv.page_size = value;
                         if (name == "kv_heads") c.kv.kv_heads = value;
                         if (name == "head_dim") c.kv.head_dim = value;
                         if (name == "v_head_dim") c.kv.v_head_dim = value;
                       },
                       kInvalid,
                       {name}});
    }
  return cases;
}

// gtest prints a parameter's bytes otherwise.
void PrintTo(const PlanErrorCase &c, std::ostream *os) { *os << c.name; }

class PlanErrors : public testing::TestWithParam<PlanErrorCase> {};

TEST_P(PlanErrors, RejectedWithStatusMessageNoPlanAndNoWrites) {
  const PlanErrorCase &c = GetParam();
  PagedCall call;
  c.breaks(call);
  const Snapshot before(call);
  flashcpu_plan *plan =
      reinterpret_cast<flashcpu_plan *>(&call); // must become NULL
  const flashcpu_status status =
      flashcpu_plan_create(call.ctx, &call.batch, call.q_heads, call.q.dtype,
                           call.out.dtype, &call.kv, &plan);
  EXPECT_EQ(status, c.status) << "got " << flashcpu_status_name(status) << ": "
                              << flashcpu_last_error(call.ctx);
  EXPECT_EQ(plan, nullptr);
  const std::string message = flashcpu_last_error(call.ctx);
  EXPECT_EQ(MissingWords(message, c.words), "") << "message: " << message;
  EXPECT_TRUE(before.Same(call))
      << "a rejected plan_create changed the caller's memory";
}

INSTANTIATE_TEST_SUITE_P(
    Batch, PlanErrors, testing::ValuesIn(PlanErrorCases()),
    [](const testing::TestParamInfo<PlanErrorCase> &param_info) {
      return param_info.param.name;
    });

TEST(PlanErrorsNull, NullArgumentsAreNamed) {
  PagedCall call;
  flashcpu_plan *plan = nullptr;
  EXPECT_EQ(flashcpu_plan_create(call.ctx, nullptr, 4, call.q.dtype,
                                 call.out.dtype, &call.kv, &plan),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "batch"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(flashcpu_plan_create(call.ctx, &call.batch, 4, call.q.dtype,
                                 call.out.dtype, nullptr, &plan),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "kv"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(flashcpu_plan_create(call.ctx, &call.batch, 4, call.q.dtype,
                                 call.out.dtype, &call.kv, nullptr),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "plan"))
      << flashcpu_last_error(call.ctx);
  plan = reinterpret_cast<flashcpu_plan *>(&call);
  EXPECT_EQ(flashcpu_plan_create(nullptr, &call.batch, 4, call.q.dtype,
                                 call.out.dtype, &call.kv, &plan),
            kNull);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(nullptr), "ctx"))
      << flashcpu_last_error(nullptr);
}

// A forced split-KV kernel puts every request into its family, which takes
// at most 64 rows a request.
TEST(PlanErrorsForcedKernel, SplitKvKernelRefusesRequestsOfMoreThan64Rows) {
  const char *split_kv = CatchAllKernel("split-KV decode");
  if (!split_kv) GTEST_SKIP() << "no split-KV kernel runs here";
  Context context(KernelOptions(FLASHCPU_ISA_AUTO, split_kv));
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  PagedCall call;
  for (int32_t rows : {64, 65}) {
    call.cu_seqlens_q = {0, 1, 1 + rows, 3 + rows};
    call.seq_lens_kv = {5, 7, 2};
    call.batch.tree_mask = nullptr;
    call.batch.tree_num_keys = nullptr;
    flashcpu_plan *plan = nullptr;
    const flashcpu_status status =
        flashcpu_plan_create(context, &call.batch, call.q_heads, call.q.dtype,
                             call.out.dtype, &call.kv, &plan);
    if (rows == 64) {
      EXPECT_EQ(status, FLASHCPU_OK) << flashcpu_last_error(context);
    } else {
      EXPECT_EQ(status, kInvalid);
      EXPECT_EQ(plan, nullptr);
      const std::string message = flashcpu_last_error(context);
      EXPECT_EQ(MissingWords(message, {"request 1", "65", split_kv}), "")
          << message;
    }
    flashcpu_plan_destroy(plan);
  }
}

// ---------------------------------------------------------------------------
// flashcpu_attention_paged's checks, on a valid plan.

struct RunErrorCase {
  std::string name;
  std::function<void(PagedCall &)> breaks;
  flashcpu_status status;
  std::vector<std::string> words;
};

std::vector<RunErrorCase> RunErrorCases() {
  using C = PagedCall;
  std::vector<RunErrorCase> cases = {
      // Lengths and trees come from the plan only.
      {"params_kv_lengths",
       [](C &c) {
         static const int64_t lengths[3] = {5, 7, 2};
         c.params.kv_lengths = lengths;
       },
       kInvalid,
       {"kv_lengths"}},
      {"params_tree_mask",
       [](C &c) {
         static const uint64_t bits[8] = {1, 1, 1, 1, 1, 1, 1, 1};
         static const flashcpu_tree_mask tree = {bits, 6, 1, 1, 0};
         c.params.tree_mask = &tree;
       },
       kInvalid,
       {"tree_mask"}},
      {"params_struct_size",
       [](C &c) { c.params.struct_size = 12; },
       kInvalid,
       {"struct_size"}},
      {"params_unknown_flag",
       [](C &c) { c.params.flags = 0x4u; },
       kInvalid,
       {"flags"}},
      // q and out against the plan's T, Hq and the cache's head dims.
      {"q_rows_not_T", [](C &c) { c.q.dims[1] = 5; }, kShape, {"q->dims[1]"}},
      {"q_heads_not_plans",
       [](C &c) { c.q.dims[2] = 2; },
       kShape,
       {"q->dims[2]"}},
      {"q_head_dim_not_caches",
       [](C &c) { c.q.dims[3] = 4; },
       kShape,
       {"q->dims[3]"}},
      {"q_batch_not_one",
       [](C &c) { c.q.dims[0] = 2; },
       kShape,
       {"q->dims[0]"}},
      {"out_rows_not_T",
       [](C &c) { c.out.dims[1] = 7; },
       kShape,
       {"out->dims[1]"}},
      {"out_heads_not_plans",
       [](C &c) { c.out.dims[2] = 8; },
       kShape,
       {"out->dims[2]"}},
      {"out_head_dim_not_caches",
       [](C &c) { c.out.dims[3] = 4; },
       kShape,
       {"out->dims[3]"}},
      {"q_data_null", [](C &c) { c.q.data = nullptr; }, kNull, {"q->data"}},
      {"out_data_null",
       [](C &c) { c.out.data = nullptr; },
       kNull,
       {"out->data"}},
      {"q_head_dim_strided",
       [](C &c) { c.q.strides[3] = 2; },
       kLayout,
       {"q->strides[3]"}},
      {"out_negative_stride",
       [](C &c) { c.out.strides[1] = -32; },
       kLayout,
       {"out->strides[1]"}},
      {"out_rows_share_memory",
       [](C &c) { c.out.strides[1] = 0; },
       kLayout,
       {"out"}},
      // The paged view's data, dtypes and strides (plan_create does not read
      // them; the run does).
      {"kv_k_null", [](C &c) { c.kv.k = nullptr; }, kNull, {"kv->k"}},
      {"kv_v_null", [](C &c) { c.kv.v = nullptr; }, kNull, {"kv->v"}},
      {"kv_k_dtype_unknown",
       [](C &c) { SetRawDtype(&c.kv.k_dtype, 9); },
       kDtype,
       {"kv->k_dtype"}},
      {"kv_v_dtype_unknown",
       [](C &c) { SetRawDtype(&c.kv.v_dtype, -1); },
       kDtype,
       {"kv->v_dtype"}},
      {"kv_k_negative_page_stride",
       [](C &c) { c.kv.k_strides[0] = -64; },
       kLayout,
       {"kv->k_strides[0]"}},
      {"kv_v_negative_head_stride",
       [](C &c) { c.kv.v_strides[2] = -8; },
       kLayout,
       {"kv->v_strides[2]"}},
      {"kv_k_scales_of_a_float_cache",
       [](C &c) { c.kv.k_scales = &kFloatCacheScales; },
       kInvalid,
       {"kv->k_scales"}},
      {"params_k_scales_on_the_paged_path",
       [](C &c) { c.params.k_scales = &kFloatCacheScales; },
       kInvalid,
       {"params->k_scales"}},
      // A cache shaped unlike the plan's.
      {"cache_num_pages_differs",
       [](C &c) { c.kv.num_pages = 5; },
       kShape,
       {"num_pages"}},
      {"cache_page_size_differs",
       [](C &c) {
         c.kv.page_size = 2;
         c.kv.k_strides[0] = c.kv.v_strides[0] = 2 * 2 * 8;
       },
       kShape,
       {"page_size"}},
      {"cache_kv_heads_differ",
       [](C &c) {
         c.kv = flashcpu_paged_kv_nhd(c.kv.k, c.kv.v, FLASHCPU_DTYPE_F32, 6, 4,
                                      1, 8);
       },
       kShape,
       {"kv_heads"}},
      {"cache_head_dim_differs",
       [](C &c) { c.kv.head_dim = 4; },
       kShape,
       {"head_dim"}},
      {"cache_v_head_dim_differs",
       [](C &c) { c.kv.v_head_dim = 6; },
       kShape,
       {"v_head_dim"}},
      {"cache_page_size_zero",
       [](C &c) { c.kv.page_size = 0; },
       kInvalid,
       {"page_size"}},
      // Sinks and ALiBi.
      {"sinks_dtype_unknown",
       [](C &c) { SetRawDtype(&c.params.sinks_dtype, 3); },
       kDtype,
       {"sinks_dtype"}},
      {"sinks_dtype_negative",
       [](C &c) { SetRawDtype(&c.params.sinks_dtype, -1); },
       kDtype,
       {"sinks_dtype"}},
      // [R, Hq] slopes with stride 5: request 2's head 1 is float 11.
      {"alibi_nan_in_last_request",
       [](C &c) { c.region(C::kAlibi)[11] = NAN; },
       kInvalid,
       {"alibi_slopes[11]"}},
      {"alibi_inf_first",
       [](C &c) { c.region(C::kAlibi)[0] = INFINITY; },
       kInvalid,
       {"alibi_slopes[0]"}},
      {"alibi_shared_minus_inf",
       [](C &c) {
         c.params.alibi_batch_stride = 0;
         c.region(C::kAlibi)[3] = -INFINITY;
       },
       kInvalid,
       {"alibi_slopes[3]"}},
      {"alibi_batch_stride_negative",
       [](C &c) { c.params.alibi_batch_stride = -4; },
       kInvalid,
       {"alibi_batch_stride"}},
      {"additive_mask_data_null",
       [](C &c) { c.additive.data = nullptr; },
       kNull,
       {"additive_mask"}},
      {"additive_mask_negative_stride",
       [](C &c) { c.additive.strides[2] = -1; },
       kLayout,
       {"additive_mask"}},
      // out and lse overlapping an input or each other.
      {"out_is_q", [](C &c) { c.out.data = c.q.data; }, kOverlap, {"out", "q"}},
      {"out_inside_k_pages",
       [](C &c) { c.out.data = c.region(C::kK) + 100; },
       kOverlap,
       {"out", "kv->k"}},
      {"out_ends_in_v_pages",
       [](C &c) { c.out.data = c.region(C::kV) - 150; },
       kOverlap,
       {"out", "kv->v"}},
      {"out_over_sinks",
       [](C &c) { c.out.data = c.region(C::kSinks) - 10; },
       kOverlap,
       {"out", "sinks"}},
      {"out_over_alibi_slopes",
       [](C &c) { c.out.data = c.region(C::kAlibi) + 2; },
       kOverlap,
       {"out", "ALiBi"}},
      {"out_over_additive_mask",
       [](C &c) { c.out.data = c.region(C::kAdditive) + 40; },
       kOverlap,
       {"out", "additive"}},
      {"lse_inside_k_pages",
       [](C &c) { c.lse = c.region(C::kK) + 380; },
       kOverlap,
       {"lse", "kv->k"}},
      {"lse_over_q",
       [](C &c) { c.lse = c.region(C::kQ); },
       kOverlap,
       {"lse", "q"}},
      {"lse_over_out",
       [](C &c) { c.lse = c.region(C::kOut) + 191; },
       kOverlap,
       {"lse", "out"}},
  };
  // A stride between batches of slopes must reach past one row of Hq.
  for (int64_t stride = 1; stride < PagedCall::kQHeads; stride++)
    cases.push_back({"alibi_batch_stride_" + std::to_string(stride),
                     [stride](C &c) { c.params.alibi_batch_stride = stride; },
                     kInvalid,
                     {"alibi_batch_stride"}});
  return cases;
}

void PrintTo(const RunErrorCase &c, std::ostream *os) { *os << c.name; }

class RunErrors : public testing::TestWithParam<RunErrorCase> {};

TEST_P(RunErrors, RejectedWithStatusMessageAndNoWrites) {
  const RunErrorCase &c = GetParam();
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  c.breaks(call);
  const Snapshot before(call);
  const flashcpu_status status = call.Run();
  EXPECT_EQ(status, c.status) << "got " << flashcpu_status_name(status) << ": "
                              << flashcpu_last_error(call.ctx);
  const std::string message = flashcpu_last_error(call.ctx);
  EXPECT_EQ(MissingWords(message, c.words), "") << "message: " << message;
  EXPECT_TRUE(before.Same(call))
      << "a rejected call wrote out, lse or an input";
}

INSTANTIATE_TEST_SUITE_P(
    Call, RunErrors, testing::ValuesIn(RunErrorCases()),
    [](const testing::TestParamInfo<RunErrorCase> &param_info) {
      return param_info.param.name;
    });

TEST(RunErrorsNull, NullArgumentsAreNamedAndNothingIsWritten) {
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  const Snapshot before(call);
  EXPECT_EQ(flashcpu_attention_paged(call.ctx, nullptr, &call.q, &call.kv,
                                     &call.out, call.lse, &call.params),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "plan"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_attention_paged(call.ctx, call.plan, nullptr, &call.kv,
                                     &call.out, call.lse, &call.params),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "q"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_attention_paged(call.ctx, call.plan, &call.q, nullptr,
                                     &call.out, call.lse, &call.params),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "kv"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_attention_paged(call.ctx, call.plan, &call.q, &call.kv,
                                     nullptr, call.lse, &call.params),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(call.ctx), "out"))
      << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_attention_paged(nullptr, call.plan, &call.q, &call.kv,
                                     &call.out, call.lse, &call.params),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(nullptr), "ctx"))
      << flashcpu_last_error(nullptr);
  EXPECT_TRUE(before.Same(call));
}

TEST(RunErrorsContext, PlanOfAnotherContextIsRejected) {
  PagedCall call;
  Context other(DefaultOptions());
  ASSERT_TRUE(other.ok());
  call.plan_ctx = other;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(other);
  const Snapshot before(call);
  EXPECT_EQ(call.Run(), kInvalid);
  const std::string message = flashcpu_last_error(call.ctx);
  EXPECT_EQ(MissingWords(message, {"plan", "context"}), "") << message;
  EXPECT_TRUE(before.Same(call));
  // On its own context the plan runs.
  call.call_ctx = other;
  EXPECT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(other);
}

// A success clears the message an earlier failure left.
TEST(RunErrorsContext, SuccessClearsThePreviousMessage) {
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK);
  call.q.dims[1] = 2;
  ASSERT_EQ(call.Run(), kShape);
  ASSERT_STRNE(flashcpu_last_error(call.ctx), "");
  call.q.dims[1] = PagedCall::kTokens;
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_STREQ(flashcpu_last_error(call.ctx), "");
}

// ---------------------------------------------------------------------------
// Sinks and ALiBi on flashcpu_attention (bad_call.h: B = 2, Hq = 4).

std::vector<BadCallCase> AttentionOptionCases() {
  // Sinks and slopes live in the additive mask's region, past the mask.
  auto sinks = [](BadCall &c) { return c.additive_data() + 3000; };
  auto slopes = [](BadCall &c) { return c.additive_data() + 3500; };
  auto with_slopes = [slopes](BadCall &c, int64_t stride) {
    c.params.alibi_slopes = slopes(c);
    c.params.alibi_batch_stride = stride;
  };
  std::vector<BadCallCase> cases = {
      {"sinks_dtype_unknown",
       [sinks](BadCall &c) {
         c.params.sinks = sinks(c);
         SetRawDtype(&c.params.sinks_dtype, 3);
       },
       kDtype,
       {"sinks_dtype"}},
      {"sinks_dtype_huge",
       [sinks](BadCall &c) {
         c.params.sinks = sinks(c);
         SetRawDtype(&c.params.sinks_dtype, 1000);
       },
       kDtype,
       {"sinks_dtype"}},
      {"alibi_nan",
       [with_slopes, slopes](BadCall &c) {
         with_slopes(c, 0);
         slopes(c)[2] = NAN;
       },
       kInvalid,
       {"alibi_slopes[2]"}},
      {"alibi_inf",
       [with_slopes, slopes](BadCall &c) {
         with_slopes(c, 0);
         slopes(c)[0] = INFINITY;
       },
       kInvalid,
       {"alibi_slopes[0]"}},
      {"alibi_minus_inf",
       [with_slopes, slopes](BadCall &c) {
         with_slopes(c, 0);
         slopes(c)[3] = -INFINITY;
       },
       kInvalid,
       {"alibi_slopes[3]"}},
      // [B, Hq] with stride 6: batch 1, head 2 is float 8.
      {"alibi_nan_in_second_batch",
       [with_slopes, slopes](BadCall &c) {
         with_slopes(c, 6);
         slopes(c)[8] = NAN;
       },
       kInvalid,
       {"alibi_slopes[8]"}},
      {"alibi_batch_stride_negative",
       [with_slopes](BadCall &c) { with_slopes(c, -1); },
       kInvalid,
       {"alibi_batch_stride"}},
      {"out_over_sinks",
       [sinks](BadCall &c) {
         c.params.sinks = sinks(c);
         c.params.sinks_dtype = FLASHCPU_DTYPE_F16;
         c.out.data = sinks(c) - 40;
       },
       kOverlap,
       {"out", "sinks"}},
      {"lse_over_alibi_slopes",
       [with_slopes, slopes](BadCall &c) {
         with_slopes(c, 4);
         c.lse = slopes(c) + 7;
       },
       kOverlap,
       {"lse", "ALiBi"}},
  };
  for (int64_t stride = 1; stride < BadCall::kQHeads; stride++)
    cases.push_back(
        {"alibi_batch_stride_" + std::to_string(stride),
         [with_slopes, stride](BadCall &c) { with_slopes(c, stride); },
         kInvalid,
         {"alibi_batch_stride"}});
  return cases;
}

class AttentionOptionErrors : public testing::TestWithParam<BadCallCase> {};
TEST_P(AttentionOptionErrors, RejectedWithStatusMessageAndNoWrites) {
  ExpectRejected(GetParam());
}
INSTANTIATE_TEST_SUITE_P(SinksAlibi, AttentionOptionErrors,
                         testing::ValuesIn(AttentionOptionCases()),
                         BadCallCaseName);

// The valid forms of the same options pass the checks, so that the cases
// above fail for the reason they name.
TEST(AttentionOptionBaseline, ValidSinksAndSlopesSucceed) {
  for (int64_t stride : {int64_t{0}, BadCall::kQHeads, int64_t{9}}) {
    BadCall call;
    call.params.sinks = call.additive_data() + 3000;
    call.params.sinks_dtype = FLASHCPU_DTYPE_BF16;
    call.params.alibi_slopes = call.additive_data() + 3500;
    call.params.alibi_batch_stride = stride;
    EXPECT_EQ(call.Run(), FLASHCPU_OK)
        << "stride " << stride << ": " << flashcpu_last_error(call.ctx);
  }
}

} // namespace
} // namespace fctest
