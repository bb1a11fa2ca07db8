// Malformed options: params struct, flags, scale, softcap, window, kv
// lengths, tree mask and additive mask. Like the tensor cases, each breaks
// one thing in a valid call and expects the exact status, a message naming
// the problem and nothing written.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "bad_call.h"

namespace fctest {
namespace {

constexpr flashcpu_status kNull = FLASHCPU_ERROR_NULL_POINTER;
constexpr flashcpu_status kInvalid = FLASHCPU_ERROR_INVALID_ARGUMENT;
constexpr flashcpu_status kLayout = FLASHCPU_ERROR_BAD_LAYOUT;

// The unbroken call must succeed, or every case below proves nothing.
TEST(BadCallBaseline, UnbrokenCallSucceedsAndWrites) {
  BadCall call;
  const std::vector<float> before = call.arena;
  ASSERT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  EXPECT_NE(before, call.arena);
  EXPECT_STREQ(flashcpu_last_error(call.ctx), "");
}

TEST(BadCallBaseline, NullParamsMeansDefaults) {
  BadCall call;
  call.pass_params = false;
  EXPECT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
}

TEST(BadCallBaseline, SuccessClearsThePreviousMessage) {
  BadCall call;
  call.params.window_left = -7;
  ASSERT_EQ(call.Run(), kInvalid);
  ASSERT_STRNE(flashcpu_last_error(call.ctx), "");
  call.params.window_left = 2;
  ASSERT_EQ(call.Run(), FLASHCPU_OK);
  EXPECT_STREQ(flashcpu_last_error(call.ctx), "");
}

std::vector<BadCallCase> ParamsCases() {
  const size_t size = sizeof(flashcpu_attention_params);
  std::vector<BadCallCase> cases;
  // The pre-release layout without the K/V scales is not one of them.
  for (size_t bad : {size_t{0}, size - 8, size + 8, size_t{1} << 40,
                     offsetof(flashcpu_attention_params, k_scales)})
    cases.push_back({"struct_size_" + std::to_string(bad),
                     [bad](BadCall &c) { c.params.struct_size = bad; },
                     kInvalid,
                     {"struct_size"}});
  for (uint32_t flags : {0x2u, 0x3u, 0x80000000u})
    cases.push_back({"flags_" + std::to_string(flags),
                     [flags](BadCall &c) { c.params.flags = flags; },
                     kInvalid,
                     {"flags"}});
  const struct {
    const char *name;
    float value;
  } non_finite[] = {{"nan", NAN}, {"inf", INFINITY}, {"minus_inf", -INFINITY}};
  for (const auto &bad : non_finite) {
    const float value = bad.value;
    cases.push_back({std::string("scale_") + bad.name,
                     [value](BadCall &c) { c.params.scale = value; },
                     kInvalid,
                     {"scale"}});
    cases.push_back({std::string("softcap_") + bad.name,
                     [value](BadCall &c) { c.params.softcap = value; },
                     kInvalid,
                     {"softcap"}});
  }
  cases.push_back({"softcap_negative",
                   [](BadCall &c) { c.params.softcap = -1.0f; },
                   kInvalid,
                   {"softcap"}});
  cases.push_back({"softcap_tiny_negative",
                   [](BadCall &c) { c.params.softcap = -1e-30f; },
                   kInvalid,
                   {"softcap"}});
  for (int64_t bad : {int64_t{-2}, int64_t{-100}, INT64_MIN}) {
    const std::string suffix = bad == INT64_MIN ? "min" : std::to_string(-bad);
    cases.push_back({"window_left_minus_" + suffix,
                     [bad](BadCall &c) { c.params.window_left = bad; },
                     kInvalid,
                     {"window"}});
    cases.push_back({"window_right_minus_" + suffix,
                     [bad](BadCall &c) { c.params.window_right = bad; },
                     kInvalid,
                     {"window"}});
  }
  return cases;
}

std::vector<BadCallCase> KvLengthCases() {
  return {
      {"kv_length_negative",
       [](BadCall &c) { c.kv_lengths[1] = -1; },
       kInvalid,
       {"kv_lengths"}},
      {"kv_length_above_capacity",
       [](BadCall &c) { c.kv_lengths[0] = BadCall::kKvLen + 1; },
       kInvalid,
       {"kv_lengths"}},
      {"kv_length_huge",
       [](BadCall &c) { c.kv_lengths[1] = INT64_MAX; },
       kInvalid,
       {"kv_lengths"}},
  };
}

std::vector<BadCallCase> TreeCases() {
  return {
      {"tree_bits_null",
       [](BadCall &c) { c.tree.bits = nullptr; },
       kNull,
       {"bits"}},
      {"tree_fewer_rows_than_q",
       [](BadCall &c) { c.tree.num_rows = BadCall::kQLen - 1; },
       kInvalid,
       {"tree", "rows"}},
      {"tree_num_keys_zero",
       [](BadCall &c) { c.tree.num_keys = 0; },
       kInvalid,
       {"num_keys"}},
      {"tree_num_keys_negative",
       [](BadCall &c) { c.tree.num_keys = -4; },
       kInvalid,
       {"num_keys"}},
      // kv_lengths[1] is kTreeKeys + 1: one more key than batch 1 has.
      {"tree_num_keys_above_a_batch_kv_length",
       [](BadCall &c) { c.tree.num_keys = BadCall::kTreeKeys + 2; },
       kInvalid,
       {"tree", "batch"}},
      {"tree_num_keys_above_capacity",
       [](BadCall &c) {
         c.params.kv_lengths = nullptr;
         c.tree.num_keys = BadCall::kKvLen + 1;
       },
       kInvalid,
       {"tree"}},
      {"tree_on_zero_length_batch",
       [](BadCall &c) { c.kv_lengths[1] = 0; },
       kInvalid,
       {"tree"}},
      {"tree_row_stride_zero",
       [](BadCall &c) { c.tree.row_stride = 0; },
       kInvalid,
       {"row_stride"}},
      {"tree_row_stride_too_small_for_65_keys",
       [](BadCall &c) {
         // 65 keys need two words a row.
         c.params.kv_lengths = nullptr;
         c.k.dims[1] = c.v.dims[1] = 70;
         c.params.additive_mask = nullptr;
         c.tree.num_keys = 65;
         c.tree.row_stride = 1;
       },
       kInvalid,
       {"row_stride"}},
      {"tree_batch_stride_negative",
       [](BadCall &c) { c.tree.batch_stride = -1; },
       kInvalid,
       {"batch_stride"}},
  };
}

std::vector<BadCallCase> AdditiveCases() {
  std::vector<BadCallCase> cases = {
      {"additive_data_null",
       [](BadCall &c) { c.additive.data = nullptr; },
       kNull,
       {"additive_mask", "data"}},
  };
  for (int d = 0; d < 4; d++)
    cases.push_back({"additive_stride_" + std::to_string(d) + "_negative",
                     [d](BadCall &c) { c.additive.strides[d] = -1; },
                     kLayout,
                     {"additive_mask", "negative"}});
  return cases;
}

class OptionErrors : public testing::TestWithParam<BadCallCase> {};
TEST_P(OptionErrors, RejectedWithStatusMessageAndNoWrites) {
  ExpectRejected(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Params, OptionErrors, testing::ValuesIn(ParamsCases()),
                         BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(KvLengths, OptionErrors,
                         testing::ValuesIn(KvLengthCases()), BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(TreeMask, OptionErrors, testing::ValuesIn(TreeCases()),
                         BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(AdditiveMask, OptionErrors,
                         testing::ValuesIn(AdditiveCases()), BadCallCaseName);

// Edge values the header allows must not be rejected (nor crash).
struct Edge {
  const char *name;
  void (*apply)(BadCall &);
};

const Edge kAcceptedEdges[] = {
    {"window_minus_one_both",
     [](BadCall &c) { c.params.window_left = c.params.window_right = -1; }},
    {"window_zero_both",
     [](BadCall &c) { c.params.window_left = c.params.window_right = 0; }},
    {"window_int64_max_both",
     [](BadCall &c) {
       c.params.window_left = c.params.window_right = INT64_MAX;
     }},
    {"softcap_zero_is_off", [](BadCall &c) { c.params.softcap = 0.0f; }},
    {"negative_scale", [](BadCall &c) { c.params.scale = -0.5f; }},
    {"kv_length_zero_without_tree",
     [](BadCall &c) {
       c.params.tree_mask = nullptr;
       c.kv_lengths[1] = 0;
     }},
    {"kv_length_equal_to_capacity",
     [](BadCall &c) { c.kv_lengths[1] = BadCall::kKvLen; }},
    {"tree_num_keys_equal_to_shortest_kv_length",
     [](BadCall &c) { c.tree.num_keys = BadCall::kTreeKeys + 1; }},
    {"tree_broadcast_over_batch", [](BadCall &c) { c.tree.batch_stride = 0; }},
    {"tree_extra_rows",
     [](BadCall &c) { c.tree.num_rows = BadCall::kQLen + 5; }},
    {"additive_all_strides_zero",
     [](BadCall &c) {
       std::memset(c.additive.strides, 0, sizeof c.additive.strides);
     }},
    {"kv_seq_zero_no_masks",
     [](BadCall &c) {
       c.k.dims[1] = c.v.dims[1] = 0;
       c.params.tree_mask = nullptr;
       c.params.kv_lengths = nullptr;
     }},
    {"no_lse", [](BadCall &c) { c.lse = nullptr; }},
};

class OptionEdges : public testing::TestWithParam<Edge> {};

TEST_P(OptionEdges, Accepted) {
  BadCall call;
  GetParam().apply(call);
  EXPECT_EQ(call.Run(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
}

INSTANTIATE_TEST_SUITE_P(Values, OptionEdges, testing::ValuesIn(kAcceptedEdges),
                         [](const testing::TestParamInfo<Edge> &param_info) {
                           return std::string(param_info.param.name);
                         });

} // namespace
} // namespace fctest
