// flashcpu_merge_states: attention over a case's keys cut into ranges, each
// range computed by flashcpu_attention on a sub-view of K and V, then
// merged; the merged out and lse must pass the oracle check of the whole
// case (VERIFY.md's tolerance rule). Ranges may be empty for some or all
// rows (kv lengths 0, a range past a batch's length, a range of no keys).
// Also: NaN and -inf handling, bytes independent of the thread count, and
// bad arguments (status, message, nothing written).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "merged_parts.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;
constexpr int64_t kLseGuard =
    16; // floats before lse in AttentionCase's storage

// Attention of c's queries over keys [begin, end) of every batch (clamped
// to the batch's kv length), through sub-views of k and v.
Part RunRange(AttentionCase &c, int64_t begin, int64_t end,
              flashcpu_dtype dtype, flashcpu_context *ctx) {
  const flashcpu_tensor q = c.q().View();
  flashcpu_tensor k = c.k().View(), v = c.v().View();
  const int64_t batch = q.dims[0], rows = q.dims[1], heads = q.dims[2];
  for (flashcpu_tensor *t : {&k, &v}) {
    t->data = static_cast<char *>(t->data) +
              begin * t->strides[1] *
                  static_cast<int64_t>(flashcpu_dtype_size(t->dtype));
    t->dims[1] = end - begin;
  }
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < batch; b++) {
    const int64_t length = std::min(c.kv_length_of(b), end);
    lengths.push_back(std::max<int64_t>(0, length - begin));
  }
  flashcpu_attention_params params = c.params();
  params.kv_lengths = lengths.data();
  flashcpu_additive_mask additive;
  if (params.additive_mask) {
    additive = *params.additive_mask;
    additive.data += begin * additive.strides[3];
    params.additive_mask = &additive;
  }
  Part part{
      TestTensor(dtype, {batch, rows, heads, v.dims[3]}, Layout::kBHSD, rows),
      std::vector<float>(static_cast<size_t>(batch * heads * rows), NAN)};
  flashcpu_tensor out = part.out.View();
  EXPECT_EQ(flashcpu_attention(ctx, &q, &k, &v, &out, part.lse.data(), &params),
            FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  return part;
}

// Cuts c's keys at `cuts`, runs each range, merges into c's out and lse.
flashcpu_status MergeRanges(AttentionCase &c, const std::vector<int64_t> &cuts,
                            flashcpu_dtype part_dtype, flashcpu_context *ctx) {
  std::vector<Part> parts;
  int64_t begin = 0;
  std::vector<int64_t> ends = cuts;
  ends.push_back(c.k().dims()[1]);
  for (int64_t end : ends) {
    parts.push_back(RunRange(c, begin, end, part_dtype, ctx));
    begin = end;
  }
  return MergeIntoCase(c, parts, ctx);
}

struct MergeCase {
  const char *name;
  std::vector<int64_t> cuts;
  flashcpu_dtype in_dtype, part_dtype,
      out_dtype; // q/k/v, the states, the merge
  std::function<void(AttentionCase &)> options;
};

const MergeCase kMergeCases[] = {
    {"two_halves_f32", {70}, F32, F32, F32, [](AttentionCase &) {}},
    {"f32_states_to_f16", {33}, F32, F32, F16, [](AttentionCase &) {}},
    {"f32_states_to_bf16", {100}, F32, F32, BF16, [](AttentionCase &) {}},
    {"f16_states_to_f16", {64}, F32, F16, F16, [](AttentionCase &) {}},
    {"bf16_states_to_bf16", {64}, F32, BF16, BF16, [](AttentionCase &) {}},
    {"bf16_inputs_f32_states_large_scores",
     {90},
     BF16,
     F32,
     F32,
     [](AttentionCase &c) { c.magnitude(Magnitude::kLarge); }},
    {"three_ranges_kv_lengths_0_1_and_past_a_cut",
     {1, 50},
     F32,
     F32,
     F32,
     [](AttentionCase &c) {
       c.batch(4).kv_lengths({0, 1, 40, 130});
     }},
    {"second_range_empty", {130}, F32, F32, F16, [](AttentionCase &) {}},
    {"first_range_empty", {0}, F32, F32, F32, [](AttentionCase &) {}},
    {"additive_hides_whole_ranges_softcap",
     {20, 21, 90},
     F32,
     F32,
     F32,
     [](AttentionCase &c) {
       c.additive(AdditivePattern::kFull, 0.6).softcap(5.0f);
     }},
    {"eight_ranges_gqa",
     {10, 20, 30, 40, 50, 60, 128},
     F32,
     F32,
     BF16,
     [](AttentionCase &c) { c.heads(8, 2).head_dim(100); }},
};

class MergeMatchesOracle : public testing::TestWithParam<MergeCase> {};

TEST_P(MergeMatchesOracle, OnAttentionSplitIntoKeyRanges) {
  const MergeCase &m = GetParam();
  AttentionCase c;
  c.batch(2).q_len(3).kv_len(130).heads(4, 4).head_dim(40).seed(11);
  c.dtypes(m.in_dtype, m.in_dtype, m.out_dtype);
  m.options(c);
  c.Build();
  flashcpu_context *ctx = SharedContext();
  // Run the whole case once: it records the input snapshots the check uses.
  ASSERT_EQ(c.Run(ctx), FLASHCPU_OK) << flashcpu_last_error(ctx);
  ASSERT_EQ(MergeRanges(c, m.cuts, m.part_dtype, ctx), FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  EXPECT_STREQ(flashcpu_last_error(ctx), "");
  EXPECT_TRUE(c.CheckAgainstOracle());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MergeMatchesOracle, testing::ValuesIn(kMergeCases),
    [](const testing::TestParamInfo<MergeCase> &param_info) {
      return std::string(param_info.param.name);
    });

// Hand-made states, f32, one row of width 3 per state.
struct SmallMerge {
  std::vector<float> out_a{1, 2, 3}, out_b{5, 6, 7}, merged{-9, -9, -9};
  float lse_a = 0.0f, lse_b = 0.0f, lse = -9.0f;

  flashcpu_status Run(flashcpu_context *ctx) {
    flashcpu_tensor states[2] = {
        flashcpu_tensor_bshd(out_a.data(), F32, 1, 1, 1, 3),
        flashcpu_tensor_bshd(out_b.data(), F32, 1, 1, 1, 3)};
    const float *lses[2] = {&lse_a, &lse_b};
    flashcpu_tensor out = flashcpu_tensor_bshd(merged.data(), F32, 1, 1, 1, 3);
    return flashcpu_merge_states(ctx, 2, states, lses, &out, &lse);
  }
};

TEST(MergeStates, WeighsByExpOfLse) {
  SmallMerge m;
  m.lse_a = std::log(1.0f);
  m.lse_b = std::log(3.0f); // b carries three times a's mass
  ASSERT_EQ(m.Run(SharedContext()), FLASHCPU_OK);
  for (int d = 0; d < 3; d++)
    EXPECT_NEAR(m.merged[d], 0.25 * m.out_a[d] + 0.75 * m.out_b[d], 1e-5);
  EXPECT_NEAR(m.lse, std::log(4.0), 1e-6);
}

TEST(MergeStates, EmptySidesContributeNothingAndNeverNaN) {
  SmallMerge m;
  m.lse_a = -INFINITY;
  m.out_a = {NAN, NAN, NAN}; // an empty state's values are not read
  m.lse_b = 1.5f;
  ASSERT_EQ(m.Run(SharedContext()), FLASHCPU_OK);
  EXPECT_EQ(m.merged, m.out_b);
  EXPECT_EQ(m.lse, 1.5f);

  SmallMerge both;
  both.lse_a = both.lse_b = -INFINITY;
  ASSERT_EQ(both.Run(SharedContext()), FLASHCPU_OK);
  EXPECT_EQ(both.merged, (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(both.lse, -INFINITY);
}

TEST(MergeStates, NaNPropagates) {
  SmallMerge lse_nan;
  lse_nan.lse_b = NAN;
  ASSERT_EQ(lse_nan.Run(SharedContext()), FLASHCPU_OK);
  for (float x : lse_nan.merged) EXPECT_TRUE(std::isnan(x));
  EXPECT_TRUE(std::isnan(lse_nan.lse));

  SmallMerge value_nan;
  value_nan.out_a[1] = NAN;
  ASSERT_EQ(value_nan.Run(SharedContext()), FLASHCPU_OK);
  EXPECT_TRUE(std::isnan(value_nan.merged[1]));
  EXPECT_FALSE(std::isnan(value_nan.merged[0]));
}

// Finite lse values as far apart as floats go: the smaller weighs exactly
// 0 (it is not an empty state: NaN in its values still reaches the row),
// and the merged lse is the larger one, not a saturated or infinite value.
TEST(MergeStates, FiniteLseAtTheEndsOfTheRange) {
  SmallMerge m;
  m.lse_a = 3e38f;
  m.lse_b = -3e38f;
  ASSERT_EQ(m.Run(SharedContext()), FLASHCPU_OK);
  EXPECT_EQ(m.merged, m.out_a);
  EXPECT_EQ(m.lse, 3e38f);

  SmallMerge low;
  low.lse_a = -FLT_MAX;
  low.lse_b = -FLT_MAX;
  ASSERT_EQ(low.Run(SharedContext()), FLASHCPU_OK);
  for (int d = 0; d < 3; d++)
    EXPECT_NEAR(low.merged[d], 0.5 * (low.out_a[d] + low.out_b[d]), 1e-6);
  EXPECT_EQ(low.lse, -FLT_MAX);

  SmallMerge poisoned;
  poisoned.lse_a = FLT_MAX;
  poisoned.lse_b = -FLT_MAX;
  poisoned.out_b[2] = NAN;
  ASSERT_EQ(poisoned.Run(SharedContext()), FLASHCPU_OK);
  EXPECT_TRUE(std::isnan(poisoned.merged[2]));
  EXPECT_EQ(poisoned.merged[0], poisoned.out_a[0]);
}

TEST(MergeStates, SameBytesForAnyThreadCount) {
  AttentionCase c;
  c.batch(3)
      .q_len(5)
      .kv_len(200)
      .heads(6, 2)
      .head_dim(72)
      .dtypes(BF16, BF16, F32)
      .seed(5)
      .kv_lengths({200, 0, 77});
  c.Build();
  std::vector<unsigned char> reference_out;
  std::vector<float> reference_lse;
  for (int threads : {1, 2, 3, 7}) {
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.num_threads = threads;
    flashcpu_context *ctx = nullptr;
    ASSERT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK);
    ASSERT_EQ(c.Run(ctx), FLASHCPU_OK);
    ASSERT_EQ(MergeRanges(c, {16, 17, 100, 150}, F32, ctx), FLASHCPU_OK);
    std::vector<float> lse(3 * 6 * 5);
    std::memcpy(lse.data(), &c.lse_storage_for_checker_tests(kLseGuard),
                lse.size() * sizeof(float));
    if (threads == 1) {
      EXPECT_TRUE(c.CheckAgainstOracle());
      reference_out = c.out().bytes();
      reference_lse = lse;
    } else {
      EXPECT_EQ(c.out().bytes(), reference_out) << threads << " threads";
      EXPECT_EQ(std::memcmp(lse.data(), reference_lse.data(),
                            lse.size() * sizeof(float)),
                0)
          << threads << " threads";
    }
    flashcpu_context_destroy(ctx);
  }
}

// A valid two-state merge that each test breaks in one way.
struct MergeCall {
  static constexpr int64_t kB = 2, kL = 3, kH = 2, kD = 8, kRow = kB * kL * kH;
  // One arena so that out and lse can be pointed into the inputs.
  std::vector<float> arena = std::vector<float>(4 * kRow * kD + 3 * kRow, 0.5f);
  float *a() { return arena.data(); }
  float *b() { return arena.data() + kRow * kD; }
  float *out_data() { return arena.data() + 2 * kRow * kD; }
  float *lse_a() { return arena.data() + 4 * kRow * kD; }
  float *lse_b() { return lse_a() + kRow; }
  float *lse_out() { return lse_b() + kRow; }

  flashcpu_tensor states[2], out;
  const float *lses[2];
  int64_t count = 2;
  const flashcpu_tensor *states_arg = states;
  const float *const *lses_arg = lses;
  float *lse = nullptr;
  flashcpu_context *ctx = SharedContext();

  MergeCall() {
    states[0] = flashcpu_tensor_bshd(a(), F32, kB, kL, kH, kD);
    states[1] = flashcpu_tensor_bshd(b(), F32, kB, kL, kH, kD);
    out = flashcpu_tensor_bshd(out_data(), F32, kB, kL, kH, kD);
    lses[0] = lse_a();
    lses[1] = lse_b();
    lse = lse_out();
  }
  flashcpu_status Run() {
    return flashcpu_merge_states(ctx, count, states_arg, lses_arg, &out, lse);
  }
};

struct BadMerge {
  const char *name;
  std::function<void(MergeCall &)> breaks;
  flashcpu_status status;
  const char *words; // the message must contain this
};

const BadMerge kBadMerges[] = {
    {"null_ctx", [](MergeCall &m) { m.ctx = nullptr; },
     FLASHCPU_ERROR_NULL_POINTER, "ctx"},
    {"zero_count", [](MergeCall &m) { m.count = 0; },
     FLASHCPU_ERROR_INVALID_ARGUMENT, "count"},
    {"null_states", [](MergeCall &m) { m.states_arg = nullptr; },
     FLASHCPU_ERROR_NULL_POINTER, "states"},
    {"null_lse_array", [](MergeCall &m) { m.lses_arg = nullptr; },
     FLASHCPU_ERROR_NULL_POINTER, "state_lse"},
    {"null_state_lse", [](MergeCall &m) { m.lses[1] = nullptr; },
     FLASHCPU_ERROR_NULL_POINTER, "state_lse[1]"},
    {"null_state_data", [](MergeCall &m) { m.states[1].data = nullptr; },
     FLASHCPU_ERROR_NULL_POINTER, "states[1]->data"},
    {"bad_dtype",
     [](MergeCall &m) { m.states[0].dtype = static_cast<flashcpu_dtype>(7); },
     FLASHCPU_ERROR_UNSUPPORTED_DTYPE, "states[0]->dtype"},
    {"shape_mismatch", [](MergeCall &m) { m.states[1].dims[2] = 1; },
     FLASHCPU_ERROR_SHAPE_MISMATCH, "states[1]->dims[2]"},
    {"head_dim_not_contiguous", [](MergeCall &m) { m.out.strides[3] = 2; },
     FLASHCPU_ERROR_BAD_LAYOUT, "out->strides[3]"},
    {"negative_stride", [](MergeCall &m) { m.states[0].strides[1] = -1; },
     FLASHCPU_ERROR_BAD_LAYOUT, "states[0]->strides[1]"},
    {"zero_dim", [](MergeCall &m) { m.out.dims[0] = 0; },
     FLASHCPU_ERROR_INVALID_ARGUMENT, "out->dims[0]"},
    {"out_rows_alias", [](MergeCall &m) { m.out.strides[1] = 0; },
     FLASHCPU_ERROR_BAD_LAYOUT, "share memory"},
    {"out_overlaps_state", [](MergeCall &m) { m.out.data = m.b(); },
     FLASHCPU_ERROR_OVERLAP, "out overlaps states[1]"},
    {"lse_overlaps_state_lse", [](MergeCall &m) { m.lse = m.lse_a() + 1; },
     FLASHCPU_ERROR_OVERLAP, "lse overlaps state_lse[0]"},
    {"lse_overlaps_out", [](MergeCall &m) { m.lse = m.out_data() + 5; },
     FLASHCPU_ERROR_OVERLAP, "lse overlaps out"},
    {"size_overflow",
     [](MergeCall &m) {
       m.out.dims[0] = INT64_C(1) << 40;
       m.out.strides[0] = INT64_C(1) << 40;
     },
     FLASHCPU_ERROR_SIZE_OVERFLOW, "out's dims and strides reach past"},
};

class MergeRejects : public testing::TestWithParam<BadMerge> {};

TEST_P(MergeRejects, WithStatusMessageAndNothingWritten) {
  const BadMerge &bad = GetParam();
  MergeCall m;
  bad.breaks(m);
  const std::vector<float> before = m.arena;
  EXPECT_EQ(m.Run(), bad.status);
  EXPECT_NE(std::string(flashcpu_last_error(m.ctx)).find(bad.words),
            std::string::npos)
      << flashcpu_last_error(m.ctx);
  EXPECT_EQ(
      std::memcmp(before.data(), m.arena.data(), before.size() * sizeof(float)),
      0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MergeRejects, testing::ValuesIn(kBadMerges),
    [](const testing::TestParamInfo<BadMerge> &param_info) {
      return std::string(param_info.param.name);
    });

} // namespace
} // namespace fctest
