// flashcpu_attention_params.query_offsets: a sequence's keys cut into
// consecutive parts, each part computed on its own view with the queries
// placed past it (offset = keys after the part), the parts merged with
// flashcpu_merge_states: the merged result must pass the oracle check of
// the whole sequence under causal, windows and ALiBi, on every kernel this
// CPU runs. Also: offset 0 changes no byte, the paged path honours the
// offsets with the contiguous call's bytes, and out-of-range offsets are
// refused.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "merged_parts.h"
#include "fixtures.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, BF16 = FLASHCPU_DTYPE_BF16;

// A contiguous BSHD tensor.
TestTensor Bshd(flashcpu_dtype dtype, std::array<int64_t, 4> dims) {
  return TestTensor(dtype, dims, Layout::kBSHD, dims[1]);
}

// Attention of c's queries over keys [begin, end) of every batch, through
// sub-views of k and v, with each batch's queries placed past the part.
// Only the first part gets the sinks (they join the softmax once).
flashcpu_status RunPart(AttentionCase &c, int64_t begin, int64_t end,
                        bool first, flashcpu_context *ctx, Part *part) {
  const flashcpu_tensor q = c.q().View();
  flashcpu_tensor k = c.k().View(), v = c.v().View();
  const int64_t batch = q.dims[0], rows = q.dims[1], heads = q.dims[2];
  for (flashcpu_tensor *t : {&k, &v}) {
    t->data = static_cast<char *>(t->data) +
              begin * t->strides[1] *
                  static_cast<int64_t>(flashcpu_dtype_size(t->dtype));
    t->dims[1] = end - begin;
  }
  std::vector<int64_t> lengths, offsets;
  for (int64_t b = 0; b < batch; b++) {
    const int64_t length = c.kv_length_of(b);
    const int64_t part_end = std::min(length, end);
    lengths.push_back(std::max<int64_t>(0, part_end - begin));
    offsets.push_back(std::max<int64_t>(0, length - part_end));
  }
  flashcpu_attention_params params = c.params();
  params.kv_lengths = lengths.data();
  params.query_offsets = offsets.data();
  if (!first) params.sinks = nullptr;
  flashcpu_additive_mask additive;
  if (params.additive_mask) {
    additive = *params.additive_mask;
    additive.data += begin * additive.strides[3];
    params.additive_mask = &additive;
  }
  part->out = Bshd(F32, {batch, rows, heads, v.dims[3]});
  part->lse.assign(static_cast<size_t>(batch * heads * rows), NAN);
  flashcpu_tensor out = part->out.View();
  return flashcpu_attention(ctx, &q, &k, &v, &out, part->lse.data(), &params);
}

// Cuts c's keys at `cuts`, runs the parts and merges them into c's out and
// lse. UNSUPPORTED when a forced kernel cannot compute a part.
flashcpu_status MergeParts(AttentionCase &c, const std::vector<int64_t> &cuts,
                           flashcpu_context *ctx) {
  std::vector<Part> parts(cuts.size() + 1);
  std::vector<int64_t> ends = cuts;
  ends.push_back(c.k().dims()[1]);
  int64_t begin = 0;
  for (size_t i = 0; i < ends.size(); i++) {
    const flashcpu_status status =
        RunPart(c, begin, ends[i], i == 0, ctx, &parts[i]);
    if (status != FLASHCPU_OK) return status;
    begin = ends[i];
  }
  return MergeIntoCase(c, parts, ctx);
}

struct OffsetCase {
  const char *name;
  int64_t q_len;
  std::vector<int64_t> cuts;
  std::function<void(AttentionCase &)> options;
};

const OffsetCase kOffsetCases[] = {
    {"decode_causal_window",
     1,
     {64, 100},
     [](AttentionCase &c) { c.causal().window(70, 0); }},
    {"verify_causal_cut_inside_the_queries",
     6,
     {40, 127},
     [](AttentionCase &c) { c.causal(); }},
    {"verify_window_left_across_parts",
     5,
     {50, 90, 120},
     [](AttentionCase &c) { c.causal().window(45, 0); }},
    {"verify_window_both_sides_not_causal",
     7,
     {30, 126},
     [](AttentionCase &c) { c.window(20, 2); }},
    {"verify_alibi_causal",
     4,
     {32, 96},
     [](AttentionCase &c) { c.causal().alibi(); }},
    {"verify_alibi_both_sides_per_batch_slopes",
     6,
     {64, 127},
     [](AttentionCase &c) { c.alibi(true); }},
    {"prefill_causal_window_softcap_sinks",
     40,
     {33, 70, 110},
     [](AttentionCase &c) { c.causal().window(30, 0).softcap(8.0f).sinks(); }},
    {"prefill_alibi_additive_gqa",
     24,
     {16, 80},
     [](AttentionCase &c) { c.causal().alibi().additive().heads(8, 2); }},
};

class QueryOffsets : public testing::TestWithParam<OffsetCase> {};

TEST_P(QueryOffsets, PartsMergeToTheWholeSequence) {
  const OffsetCase &o = GetParam();
  int ran = 0;
  for (const char *kernel : RunnableKernelsThenDefault()) {
    SCOPED_TRACE(kernel ? kernel : "the default choice");
    AttentionCase c;
    c.batch(2).q_len(o.q_len).kv_len(130).heads(4, 2).head_dim(32).seed(23);
    c.dtypes(BF16, BF16, F32).kv_lengths({130, 117});
    o.options(c);
    c.Build();
    Context ctx(KernelOptions(FLASHCPU_ISA_AUTO, kernel));
    ASSERT_TRUE(ctx.ok());
    // The whole case once: it records the input snapshots the check uses.
    if (c.Run(ctx) != FLASHCPU_OK) continue; // the kernel does not take it
    ASSERT_EQ(MergeParts(c, o.cuts, ctx), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    EXPECT_TRUE(c.CheckAgainstOracle());
    ran++;
  }
  EXPECT_GE(ran, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QueryOffsets, testing::ValuesIn(kOffsetCases),
    [](const testing::TestParamInfo<OffsetCase> &param_info) {
      return std::string(param_info.param.name);
    });

// Offsets of 0 are the default: the same bytes as no offsets.
TEST(QueryOffsetsZero, ChangeNoByte) {
  AttentionCase c;
  c.batch(2).q_len(5).kv_len(90).heads(4, 2).head_dim(48).seed(3);
  c.causal().window(40, 1).alibi().dtypes(BF16, BF16, BF16);
  c.Build();
  ASSERT_EQ(c.Run(SharedContext()), FLASHCPU_OK);
  const std::vector<uint64_t> plain = ElementBits(c.out());
  const std::vector<int64_t> zeros = {0, 0};
  flashcpu_attention_params params = c.params();
  params.query_offsets = zeros.data();
  TestTensor out = Bshd(BF16, {2, 5, 4, 48});
  const flashcpu_tensor q = c.q().View(), k = c.k().View(), v = c.v().View(),
                        out_view = out.View();
  ASSERT_EQ(flashcpu_attention(SharedContext(), &q, &k, &v, &out_view, nullptr,
                               &params),
            FLASHCPU_OK);
  EXPECT_EQ(ElementBits(out), plain);
}

// Keys past every query: a causal part of keys beyond the queries sees
// nothing (negative offsets are allowed: queries before the part's end).
TEST(QueryOffsetsNegative, QueriesBeforeThePartSeeNothingUnderCausal) {
  AttentionCase c;
  c.batch(1).q_len(3).kv_len(40).heads(2, 2).head_dim(16).causal().seed(9);
  c.Build();
  const std::vector<int64_t> offsets = {-3};
  flashcpu_attention_params params = c.params();
  params.query_offsets = offsets.data();
  TestTensor out = Bshd(F32, {1, 3, 2, 16});
  std::vector<float> lse(6, 0.0f);
  const flashcpu_tensor q = c.q().View(), k = c.k().View(), v = c.v().View(),
                        out_view = out.View();
  ASSERT_EQ(flashcpu_attention(SharedContext(), &q, &k, &v, &out_view,
                               lse.data(), &params),
            FLASHCPU_OK);
  // Positions 37 - 3 + i: row i sees keys 0 .. 34 + i.
  for (int64_t h = 0; h < 2; h++)
    for (int64_t i = 0; i < 3; i++) EXPECT_TRUE(std::isfinite(lse[h * 3 + i]));
  const std::vector<int64_t> far = {-40};
  params.query_offsets = far.data();
  ASSERT_EQ(flashcpu_attention(SharedContext(), &q, &k, &v, &out_view,
                               lse.data(), &params),
            FLASHCPU_OK);
  for (float x : lse) EXPECT_EQ(x, -INFINITY);
  for (int64_t i = 0; i < 3; i++)
    for (int64_t h = 0; h < 2; h++)
      for (int64_t d = 0; d < 16; d++) EXPECT_EQ(out.Get(0, i, h, d), 0.0);
}

TEST(QueryOffsetsChecks, OutOfRangeIsRefusedWithNothingWritten) {
  AttentionCase c;
  c.batch(2).q_len(2).kv_len(8).head_dim(16).seed(4);
  c.Build();
  const std::vector<int64_t> offsets = {0, (INT64_C(1) << 62) + 1};
  flashcpu_attention_params params = c.params();
  params.query_offsets = offsets.data();
  TestTensor out = Bshd(F32, {2, 2, 1, 16});
  out.Poison();
  const std::vector<unsigned char> before = out.bytes();
  const flashcpu_tensor q = c.q().View(), k = c.k().View(), v = c.v().View(),
                        out_view = out.View();
  EXPECT_EQ(flashcpu_attention(SharedContext(), &q, &k, &v, &out_view, nullptr,
                               &params),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(SharedContext()))
                .find("query_offsets[1]"),
            std::string::npos)
      << flashcpu_last_error(SharedContext());
  EXPECT_EQ(out.bytes(), before);
}

// One request over pages that hold the contiguous K/V in order: the paged
// call with an offset writes the contiguous call's bytes.
TEST(QueryOffsetsPaged, SameBytesAsTheContiguousCall) {
  constexpr int64_t kKeys = 96, kPageSize = 16, kRows = 4, kHq = 4, kHkv = 2,
                    kD = 32;
  AttentionCase c;
  c.batch(1).q_len(kRows).kv_len(kKeys).heads(kHq, kHkv).head_dim(kD);
  c.causal().window(50, 0).alibi().dtypes(F32, F32, F32).seed(17);
  c.Build();
  const std::vector<int64_t> offsets = {21};
  flashcpu_attention_params params = c.params();
  params.query_offsets = offsets.data();
  const flashcpu_tensor q = c.q().View(), k = c.k().View(), v = c.v().View();
  TestTensor contiguous = Bshd(F32, {1, kRows, kHq, kD});
  const flashcpu_tensor contiguous_view = contiguous.View();
  std::vector<float> contiguous_lse(kHq * kRows);
  flashcpu_context *ctx = SharedContext();
  ASSERT_EQ(flashcpu_attention(ctx, &q, &k, &v, &contiguous_view,
                               contiguous_lse.data(), &params),
            FLASHCPU_OK)
      << flashcpu_last_error(ctx);

  // Pages [kKeys / kPageSize, kPageSize, Hkv, D] over k's and v's rows.
  std::vector<float> k_pages, v_pages;
  for (int64_t s = 0; s < kKeys; s++)
    for (int64_t h = 0; h < kHkv; h++)
      for (int64_t d = 0; d < kD; d++) {
        k_pages.push_back(static_cast<float>(c.k().Get(0, s, h, d)));
        v_pages.push_back(static_cast<float>(c.v().Get(0, s, h, d)));
      }
  flashcpu_paged_kv cache =
      flashcpu_paged_kv_nhd(k_pages.data(), v_pages.data(), F32,
                            kKeys / kPageSize, kPageSize, kHkv, kD);
  const int32_t cu_seqlens[2] = {0, kRows}, lengths[1] = {kKeys};
  std::vector<int32_t> table;
  for (int32_t page = 0; page < kKeys / kPageSize; page++)
    table.push_back(page);
  flashcpu_batch batch;
  flashcpu_batch_init(&batch);
  batch.num_requests = 1;
  batch.cu_seqlens_q = cu_seqlens;
  batch.seq_lens_kv = lengths;
  batch.block_table = table.data();
  batch.block_table_stride = static_cast<int64_t>(table.size());
  flashcpu_plan *plan = nullptr;
  ASSERT_EQ(flashcpu_plan_create(ctx, &batch, kHq, F32, F32, &cache, &plan),
            FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  TestTensor paged = Bshd(F32, {1, kRows, kHq, kD});
  const flashcpu_tensor paged_view = paged.View();
  std::vector<float> paged_lse(kHq * kRows);
  EXPECT_EQ(flashcpu_attention_paged(ctx, plan, &q, &cache, &paged_view,
                                     paged_lse.data(), &params),
            FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  flashcpu_plan_destroy(plan);
  EXPECT_EQ(ElementBits(paged), ElementBits(contiguous));
  EXPECT_EQ(std::memcmp(paged_lse.data(), contiguous_lse.data(),
                        paged_lse.size() * sizeof(float)),
            0);
}

} // namespace
} // namespace fctest
