// The plan's lifecycle through the public API: destroy(NULL), a plan
// outliving its context, num_tokens, describe, a forced prefill kernel,
// a plan forced onto the int8-K decode kernel over int8 pages,
// the batch arrays copied at creation, optional lse, one plan reused
// across layers; and the paged-KV and batch helpers.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "paged_call.h"
#include "test_tensor.h"

namespace fctest {
namespace {

// ---------------------------------------------------------------------------
// The plan's lifecycle.

TEST(PlanLifecycle, DestroyNullIsIgnored) { flashcpu_plan_destroy(nullptr); }

TEST(PlanLifecycle, PlanMayOutliveItsContext) {
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK);
  flashcpu_context_destroy(call.ctx);
  call.ctx = nullptr;
  flashcpu_plan_destroy(call.plan);
  call.plan = nullptr;
}

TEST(PlanLifecycle, NumTokensIsTheLastCuSeqlen) {
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK);
  EXPECT_EQ(flashcpu_plan_num_tokens(call.plan), PagedCall::kTokens);
  // Requests of no rows, last and first, count nothing.
  call.cu_seqlens_q = {0, 0, 3, 3};
  call.batch.tree_mask = nullptr;
  call.batch.tree_num_keys = nullptr;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_plan_num_tokens(call.plan), 3);
}

// A step of no rows at all is a valid step that writes nothing.
TEST(PlanLifecycle, StepWithoutRowsRunsAndWritesNothing) {
  PagedCall call;
  call.cu_seqlens_q = {0, 0, 0, 0};
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_EQ(flashcpu_plan_num_tokens(call.plan), 0);
  call.q.dims[1] = call.out.dims[1] = 0;
  call.params.additive_mask = nullptr;
  const Snapshot before(call);
  EXPECT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_TRUE(before.Same(call));
}

std::string Describe(const flashcpu_plan *plan) {
  std::vector<char> text(flashcpu_plan_describe(plan, nullptr, 0) + 1);
  flashcpu_plan_describe(plan, text.data(), text.size());
  return text.data();
}

TEST(PlanLifecycle, DescribeNamesTheFamiliesItRuns) {
  ScopedEnv no_tune_file("FLASHCPU_TUNE_FILE", nullptr);
  flashcpu_context_options options = DefaultOptions();
  options.settings = "splitkv_max_rows = 2"; // request 0 (1 row) decodes, 1 and
                                             // 2 (3, 2 rows)...
  Context context(options);
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  PagedCall call;
  call.plan_ctx = context;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(context);
  const std::string text = Describe(call.plan);
  EXPECT_NE(text.find("split-KV decode: 2 requests"), std::string::npos)
      << text;
  EXPECT_NE(text.find("prefill: 1 requests"), std::string::npos) << text;
  EXPECT_NE(text.find("tree masks"), std::string::npos) << text;
  EXPECT_NE(text.find("3 requests"), std::string::npos) << text;

  // Like snprintf: the full length whatever the buffer, truncated with a NUL.
  char small[12];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(flashcpu_plan_describe(call.plan, small, sizeof small),
            text.size());
  EXPECT_EQ(std::string(small), text.substr(0, sizeof small - 1));

  // A step of decode rows only has no prefill part.
  call.cu_seqlens_q = {0, 1, 2, 3};
  call.batch.tree_mask = nullptr;
  call.batch.tree_num_keys = nullptr;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(context);
  const std::string decode_only = Describe(call.plan);
  EXPECT_NE(decode_only.find("split-KV decode: 3 requests"), std::string::npos)
      << decode_only;
  EXPECT_EQ(decode_only.find("prefill"), std::string::npos) << decode_only;
  EXPECT_EQ(decode_only.find("tree masks"), std::string::npos) << decode_only;
}

// A forced prefill kernel takes every request, decode rows included.
TEST(PlanLifecycle, ForcedPrefillKernelRunsEveryRequest) {
  const char *prefill = CatchAllKernel("prefill");
  ASSERT_NE(prefill, nullptr) << "every build has a prefill kernel";
  Context context(KernelOptions(FLASHCPU_ISA_AUTO, prefill));
  ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
  PagedCall call;
  call.plan_ctx = context;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(context);
  const std::string text = Describe(call.plan);
  EXPECT_NE(text.find("prefill: 3 requests"), std::string::npos) << text;
  EXPECT_EQ(text.find("split-KV"), std::string::npos) << text;
}

// Pages of int8 K: the plan reserves for their kernels too, so it can be
// forced onto the int8-K decode kernel where the CPU runs it; f32 pages
// cannot take that kernel, and the message says why.
TEST(PlanLifecycle, PlansInt8PagesOntoTheirOwnKernel) {
  int ran = 0;
  for (const std::string name : {"fc_decode_splitkv_i8dot__avx512vnni",
                                 "fc_decode_splitkv_i16dot__avx512vnni",
                                 "fc_decode_splitkv_i16dot__avx2"}) {
    bool runnable = false;
    flashcpu_kernel_info info;
    flashcpu_kernel_info_init(&info);
    for (int i = 0; flashcpu_kernel_info_get(i, &info); i++)
      if (name == info.name) runnable = info.runnable != 0;
    if (!runnable) continue;
    ran++;
    Context context(KernelOptions(FLASHCPU_ISA_AUTO, name.c_str()));
    ASSERT_TRUE(context.ok()) << flashcpu_last_error(nullptr);
    PagedCall call;
    call.plan_ctx = context;
    call.kv.k_dtype = FLASHCPU_DTYPE_I8;
    ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK)
        << name << ": " << flashcpu_last_error(context);
    EXPECT_NE(Describe(call.plan).find("split-KV"), std::string::npos) << name;
    call.kv.k_dtype = FLASHCPU_DTYPE_F32;
    EXPECT_EQ(call.CreatePlan(), FLASHCPU_ERROR_INVALID_ARGUMENT) << name;
    EXPECT_NE(std::string(flashcpu_last_error(context)).find("not i8 or u8"),
              std::string::npos)
        << name << ": " << flashcpu_last_error(context);
  }
  if (ran == 0) GTEST_SKIP() << "no integer split-KV kernel runs on this CPU";
}

// Random inputs for the arena's q, pages, sinks, slopes and mask.
void FillInputs(PagedCall &call, uint64_t seed) {
  Rng rng(seed);
  for (PagedCall::Region r :
       {PagedCall::kQ, PagedCall::kK, PagedCall::kV, PagedCall::kSinks,
        PagedCall::kAlibi, PagedCall::kAdditive})
    for (int64_t e = 0; e < PagedCall::kRegion; e++)
      call.region(r)[e] = static_cast<float>(rng.NonZeroUnit());
}

// What a step wrote: out's and lse's elements.
std::vector<unsigned char> OutputBytes(PagedCall &call) {
  const unsigned char *out =
      reinterpret_cast<const unsigned char *>(call.region(PagedCall::kOut));
  const unsigned char *lse =
      reinterpret_cast<const unsigned char *>(call.region(PagedCall::kLse));
  const size_t out_bytes = PagedCall::kTokens * PagedCall::kQHeads *
                           PagedCall::kHeadDim * sizeof(float);
  const size_t lse_bytes =
      PagedCall::kTokens * PagedCall::kQHeads * sizeof(float);
  std::vector<unsigned char> bytes(out_bytes + lse_bytes);
  std::memcpy(bytes.data(), out, out_bytes);
  std::memcpy(bytes.data() + out_bytes, lse, lse_bytes);
  return bytes;
}

// The plan copies the lengths, the block table and the tree bits: what the
// caller does with its arrays afterwards changes nothing.
TEST(PlanLifecycle, PlanKeepsItsOwnCopyOfTheBatch) {
  for (bool offsets : {false, true}) {
    SCOPED_TRACE(offsets ? "block_offsets" : "block table rows");
    PagedCall call;
    if (offsets) call.UseBlockOffsets();
    FillInputs(call, 11);
    ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
    ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
    const std::vector<unsigned char> reference = OutputBytes(call);

    // Overwrite every array with values that would be errors, then free them.
    auto overwrite_and_free = [](auto &array, auto value) {
      std::fill(array.begin(), array.end(), value);
      array.clear();
      array.shrink_to_fit();
    };
    overwrite_and_free(call.cu_seqlens_q, -9);
    overwrite_and_free(call.seq_lens_kv, 1 << 20);
    overwrite_and_free(call.block_table, -3);
    overwrite_and_free(call.block_offsets, 1 << 20);
    overwrite_and_free(call.tree_num_keys, 1 << 20);
    overwrite_and_free(call.tree_bits, uint64_t{0});
    std::memset(call.region(PagedCall::kOut), 0,
                PagedCall::kRegion * sizeof(float));
    std::memset(call.region(PagedCall::kLse), 0,
                PagedCall::kRegion * sizeof(float));
    ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
    EXPECT_EQ(OutputBytes(call), reference);
  }
}

// lse is optional: without it out gets the same bytes, and nothing else in
// lse's place is written.
TEST(PlanLifecycle, LseIsOptional) {
  PagedCall call;
  FillInputs(call, 12);
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  const std::vector<unsigned char> with_lse = OutputBytes(call);
  std::memset(call.region(PagedCall::kOut), 0,
              PagedCall::kRegion * sizeof(float));
  std::memset(call.region(PagedCall::kLse), 0x3c,
              PagedCall::kRegion * sizeof(float));
  const std::vector<float> lse_before(call.region(PagedCall::kLse),
                                      call.region(PagedCall::kLse) +
                                          PagedCall::kRegion);
  call.lse = nullptr;
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  const size_t out_bytes = PagedCall::kTokens * PagedCall::kQHeads *
                           PagedCall::kHeadDim * sizeof(float);
  EXPECT_EQ(std::memcmp(OutputBytes(call).data(), with_lse.data(), out_bytes),
            0);
  EXPECT_EQ(std::memcmp(lse_before.data(), call.region(PagedCall::kLse),
                        lse_before.size() * sizeof(float)),
            0);
}

// One plan serves every layer of a step: caches of the same shape and
// dtypes with other data. Each layer's bytes equal those of a plan made for
// that layer alone, in any order of the layers, for each set of dtypes.
TEST(PlanLifecycle, OnePlanServesEveryLayerLikeFreshPlans) {
  struct Dtypes {
    flashcpu_dtype q, kv, out;
  };
  const Dtypes sets[] = {
      {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F32},
      {FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_F16},
      {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_BF16, FLASHCPU_DTYPE_BF16},
      {FLASHCPU_DTYPE_F16, FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_BF16}};
  for (const Dtypes &dtypes : sets) {
    PagedCall shared; // its plan serves every layer
    shared.q.dtype = dtypes.q;
    shared.out.dtype = dtypes.out;
    shared.kv.k_dtype = shared.kv.v_dtype = dtypes.kv;
    ASSERT_EQ(shared.CreatePlan(), FLASHCPU_OK)
        << flashcpu_last_error(shared.ctx);

    auto run_layer = [&](int index, bool fresh_plan) {
      PagedCall call;
      FillInputs(call, 100 + static_cast<uint64_t>(index));
      // The same buffers reinterpreted in the layer's dtypes; f16/bf16
      // views of random float bytes hold ordinary finite values but a few
      // may not: rewrite every element from the random floats.
      for (PagedCall::Region r :
           {PagedCall::kQ, PagedCall::kK, PagedCall::kV}) {
        const flashcpu_dtype dtype = r == PagedCall::kQ ? dtypes.q : dtypes.kv;
        std::vector<float> values(call.region(r),
                                  call.region(r) + PagedCall::kRegion);
        unsigned char *bytes =
            reinterpret_cast<unsigned char *>(call.region(r));
        for (int64_t e = 0; e < PagedCall::kRegion / 2; e++)
          StoreAs(bytes + e * static_cast<int64_t>(ElementBytes(dtype)), dtype,
                  values[static_cast<size_t>(e)]);
      }
      call.q.dtype = dtypes.q;
      call.out.dtype = dtypes.out;
      call.kv.k_dtype = call.kv.v_dtype = dtypes.kv;
      // The shared plan's ctx: a plan runs on its own context only.
      call.call_ctx = shared.ctx;
      if (fresh_plan) {
        call.plan_ctx = shared.ctx;
        EXPECT_EQ(call.CreatePlan(), FLASHCPU_OK)
            << flashcpu_last_error(shared.ctx);
      } else {
        call.run_plan = shared.plan;
      }
      EXPECT_EQ(call.Run(), FLASHCPU_OK)
          << "layer " << index << ": " << flashcpu_last_error(shared.ctx);
      return OutputBytes(call);
    };
    std::vector<std::vector<unsigned char>> reused;
    for (int i = 0; i < 4; i++) reused.push_back(run_layer(i, false));
    for (int i : {2, 0, 3, 1}) {
      EXPECT_EQ(run_layer(i, true), reused[static_cast<size_t>(i)])
          << "layer " << i;
      EXPECT_EQ(run_layer(i, false), reused[static_cast<size_t>(i)])
          << "layer " << i << " again";
    }
  }
}

// A plan chose its kernels for its dtypes: a layer of other q, out or cache
// dtypes, or with other scales, is refused by name and nothing is written.
TEST(PlanLifecycle, RefusesALayerOfOtherDtypes) {
  PagedCall shared;
  ASSERT_EQ(shared.CreatePlan(), FLASHCPU_OK)
      << flashcpu_last_error(shared.ctx);
  const struct {
    const char *name;
    void (*change)(PagedCall *call);
  } cases[] = {
      {"q->dtype", [](PagedCall *c) { c->q.dtype = FLASHCPU_DTYPE_BF16; }},
      {"out->dtype", [](PagedCall *c) { c->out.dtype = FLASHCPU_DTYPE_F16; }},
      {"kv->k_dtype",
       [](PagedCall *c) { c->kv.k_dtype = FLASHCPU_DTYPE_BF16; }},
      {"kv->v_dtype", [](PagedCall *c) { c->kv.v_dtype = FLASHCPU_DTYPE_F16; }},
  };
  for (const auto &c : cases) {
    PagedCall call;
    FillInputs(call, 7);
    c.change(&call);
    call.call_ctx = shared.ctx;
    call.run_plan = shared.plan;
    const std::vector<unsigned char> before = OutputBytes(call);
    EXPECT_EQ(call.Run(), FLASHCPU_ERROR_INVALID_ARGUMENT) << c.name;
    const std::string error = flashcpu_last_error(shared.ctx);
    EXPECT_NE(error.find(c.name), std::string::npos) << error;
    EXPECT_NE(error.find("plan"), std::string::npos) << error;
    EXPECT_EQ(OutputBytes(call), before) << c.name;
  }
}

// NaN in out and lse, so that a call that writes nothing shows.
void Poison(PagedCall &call) {
  for (PagedCall::Region r : {PagedCall::kOut, PagedCall::kLse})
    std::fill(call.region(r), call.region(r) + PagedCall::kRegion, NAN);
}

// A caller's workspace of flashcpu_plan_workspace_size bytes gives the
// bytes of the context's; a misaligned or short one is refused, and the
// plan keeps the one it had.
TEST(PlanLifecycle, CallerWorkspaceGivesTheSameBytes) {
  PagedCall call;
  FillInputs(call, 11);
  call.call_ctx = call.ctx;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  const std::vector<unsigned char> reference = OutputBytes(call);

  const size_t bytes = flashcpu_plan_workspace_size(call.plan);
  EXPECT_GT(bytes, 0u); // the step has split-KV requests: partial states
  EXPECT_EQ(flashcpu_plan_workspace_size(nullptr), 0u);
  std::vector<unsigned char> memory(bytes + 128, 0xA5);
  unsigned char *aligned =
      memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64);
  EXPECT_EQ(
      flashcpu_plan_set_workspace(call.ctx, call.plan, aligned + 8, bytes),
      FLASHCPU_ERROR_BAD_LAYOUT);
  EXPECT_NE(std::string(flashcpu_last_error(call.ctx)).find("aligned"),
            std::string::npos);
  EXPECT_EQ(
      flashcpu_plan_set_workspace(call.ctx, call.plan, aligned, bytes - 1),
      FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(call.ctx))
                .find("flashcpu_plan_workspace_size"),
            std::string::npos);
  EXPECT_EQ(flashcpu_plan_set_workspace(call.ctx, nullptr, aligned, bytes),
            FLASHCPU_ERROR_NULL_POINTER);

  ASSERT_EQ(flashcpu_plan_set_workspace(call.ctx, call.plan, aligned, bytes),
            FLASHCPU_OK);
  Poison(call);
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_EQ(OutputBytes(call), reference);
  // The call wrote its partial states there.
  EXPECT_NE(std::count(aligned, aligned + bytes, 0xA5),
            static_cast<std::ptrdiff_t>(bytes));
  ASSERT_EQ(flashcpu_plan_set_workspace(call.ctx, call.plan, nullptr, 0),
            FLASHCPU_OK);
  Poison(call);
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_EQ(OutputBytes(call), reference);
}

TEST(PagedKvHelpers, NhdAndHndFillTheDocumentedStrides) {
  float k[1], v[1];
  const flashcpu_paged_kv nhd =
      flashcpu_paged_kv_nhd(k, v, FLASHCPU_DTYPE_F16, 7, 3, 2, 5);
  EXPECT_EQ(nhd.k, static_cast<void *>(k));
  EXPECT_EQ(nhd.v, static_cast<void *>(v));
  EXPECT_EQ(nhd.k_dtype, FLASHCPU_DTYPE_F16);
  EXPECT_EQ(nhd.v_dtype, FLASHCPU_DTYPE_F16);
  EXPECT_EQ(nhd.num_pages, 7);
  EXPECT_EQ(nhd.page_size, 3);
  EXPECT_EQ(nhd.kv_heads, 2);
  EXPECT_EQ(nhd.head_dim, 5);
  EXPECT_EQ(nhd.v_head_dim, 5);
  const int64_t nhd_strides[3] = {3 * 2 * 5, 2 * 5, 5};
  const int64_t hnd_strides[3] = {2 * 3 * 5, 5, 3 * 5};
  for (int d = 0; d < 3; d++) {
    EXPECT_EQ(nhd.k_strides[d], nhd_strides[d]) << d;
    EXPECT_EQ(nhd.v_strides[d], nhd_strides[d]) << d;
  }
  EXPECT_EQ(nhd.k_scales, nullptr);
  EXPECT_EQ(nhd.v_scales, nullptr);
  const flashcpu_paged_kv hnd =
      flashcpu_paged_kv_hnd(k, v, FLASHCPU_DTYPE_BF16, 7, 3, 2, 5);
  EXPECT_EQ(hnd.k_dtype, FLASHCPU_DTYPE_BF16);
  for (int d = 0; d < 3; d++) {
    EXPECT_EQ(hnd.k_strides[d], hnd_strides[d]) << d;
    EXPECT_EQ(hnd.v_strides[d], hnd_strides[d]) << d;
  }
  EXPECT_EQ(hnd.k_scales, nullptr);
  EXPECT_EQ(hnd.v_scales, nullptr);
}

TEST(PagedKvHelpers, BatchInitZeroesAndSetsStructSize) {
  flashcpu_batch batch;
  std::memset(&batch, 0x5a, sizeof batch);
  flashcpu_batch_init(&batch);
  EXPECT_EQ(batch.struct_size, sizeof(flashcpu_batch));
  EXPECT_EQ(batch.num_requests, 0);
  EXPECT_EQ(batch.cu_seqlens_q, nullptr);
  EXPECT_EQ(batch.seq_lens_kv, nullptr);
  EXPECT_EQ(batch.block_table, nullptr);
  EXPECT_EQ(batch.block_table_stride, 0);
  EXPECT_EQ(batch.block_offsets, nullptr);
  EXPECT_EQ(batch.tree_mask, nullptr);
  EXPECT_EQ(batch.tree_num_keys, nullptr);
}

TEST(PagedKvHelpers, PagedKvInitZeroesAndSetsStructSize) {
  flashcpu_paged_kv kv;
  std::memset(&kv, 0x5a, sizeof kv);
  flashcpu_paged_kv_init(&kv);
  EXPECT_EQ(kv.struct_size, sizeof(flashcpu_paged_kv));
  EXPECT_EQ(kv.k, nullptr);
  EXPECT_EQ(kv.num_pages, 0);
  EXPECT_EQ(kv.k_scales, nullptr);
  float k[1], v[1];
  EXPECT_EQ(
      flashcpu_paged_kv_nhd(k, v, FLASHCPU_DTYPE_F32, 1, 1, 1, 1).struct_size,
      sizeof(flashcpu_paged_kv));
  EXPECT_EQ(
      flashcpu_paged_kv_hnd(k, v, FLASHCPU_DTYPE_F32, 1, 1, 1, 1).struct_size,
      sizeof(flashcpu_paged_kv));
}

} // namespace
} // namespace fctest
