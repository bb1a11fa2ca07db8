// Malformed tensors and buffers: NULL pointers, dims, shapes, strides,
// overlaps, int64 overflow, unknown dtypes. Each case breaks one thing in
// an otherwise valid call (bad_call.h) and expects the exact status, a
// message naming the problem, and no byte of out, lse or any input changed.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "bad_call.h"
#include "c_abi_helpers.h"

namespace fctest {
namespace {

constexpr flashcpu_status kNull = FLASHCPU_ERROR_NULL_POINTER;
constexpr flashcpu_status kInvalid = FLASHCPU_ERROR_INVALID_ARGUMENT;
constexpr flashcpu_status kShape = FLASHCPU_ERROR_SHAPE_MISMATCH;
constexpr flashcpu_status kLayout = FLASHCPU_ERROR_BAD_LAYOUT;
constexpr flashcpu_status kOverlap = FLASHCPU_ERROR_OVERLAP;
constexpr flashcpu_status kDtype = FLASHCPU_ERROR_UNSUPPORTED_DTYPE;
constexpr flashcpu_status kOverflow = FLASHCPU_ERROR_SIZE_OVERFLOW;

// The four tensors by name, for cases that apply to each.
struct Named {
  const char *name;
  flashcpu_tensor BadCall::*tensor;
};
const Named kTensors[] = {{"q", &BadCall::q},
                          {"k", &BadCall::k},
                          {"v", &BadCall::v},
                          {"out", &BadCall::out}};

std::vector<BadCallCase> NullPointerCases() {
  std::vector<BadCallCase> cases;
  for (const Named &t : kTensors)
    cases.push_back({std::string(t.name) + "_data",
                     [t](BadCall &c) { (c.*t.tensor).data = nullptr; },
                     kNull,
                     {t.name, "data", "NULL"}});
  return cases;
}

// The call takes views by pointer; a NULL view needs its own call.
TEST(NullViewPointers, EachViewPointerNull) {
  for (int which = 0; which < 4; which++) {
    BadCall call;
    const std::vector<float> before = call.arena;
    const flashcpu_tensor *views[4] = {&call.q, &call.k, &call.v, &call.out};
    views[which] = nullptr;
    const flashcpu_status status =
        flashcpu_attention(call.ctx, views[0], views[1], views[2], views[3],
                           call.lse, &call.params);
    EXPECT_EQ(status, kNull) << kTensors[which].name;
    const std::string message = flashcpu_last_error(call.ctx);
    EXPECT_TRUE(ContainsWord(message, kTensors[which].name)) << message;
    EXPECT_EQ(before, call.arena) << kTensors[which].name;
  }
}

TEST(NullContext, MessageGoesToThreadSlotAndNothingIsWritten) {
  BadCall call;
  const std::vector<float> before = call.arena;
  EXPECT_EQ(flashcpu_attention(nullptr, &call.q, &call.k, &call.v, &call.out,
                               call.lse, &call.params),
            kNull);
  EXPECT_TRUE(ContainsWord(flashcpu_last_error(nullptr), "ctx"))
      << flashcpu_last_error(nullptr);
  EXPECT_STREQ(flashcpu_last_error(call.ctx), "")
      << "a NULL-ctx failure touched another context";
  EXPECT_EQ(before, call.arena);
}

std::vector<BadCallCase> DimCases() {
  std::vector<BadCallCase> cases;
  const char *dim_names[4] = {"batch", "seq", "heads", "head_dim"};
  for (const Named &t : kTensors)
    for (int d = 0; d < 4; d++)
      for (int64_t value : {int64_t{0}, int64_t{-3}}) {
        // k and v may have 0 rows (S = 0); below zero is still an error.
        const bool seq_of_kv = d == 1 && (t.name[0] == 'k' || t.name[0] == 'v');
        if (seq_of_kv && value == 0) continue;
        cases.push_back(
            {std::string(t.name) + "_" + dim_names[d] +
                 (value == 0 ? "_zero" : "_negative"),
             [t, d, value](BadCall &c) { (c.*t.tensor).dims[d] = value; },
             kInvalid,
             {t.name, dim_names[d]}});
      }
  return cases;
}

std::vector<BadCallCase> ShapeCases() {
  return {
      {"q_heads_not_multiple_of_kv_heads",
       [](BadCall &c) {
         c.q.dims[2] = 3;
         c.out.dims[2] = 3;
       },
       kShape,
       {"multiple"}},
      {"k_head_dim_differs_from_q",
       [](BadCall &c) { c.k.dims[3] = 6; },
       kShape,
       {"k", "head_dim"}},
      {"out_head_dim_differs_from_v",
       [](BadCall &c) { c.out.dims[3] = 6; },
       kShape,
       {"out", "head_dim"}},
      {"v_head_dim_differs_from_out",
       [](BadCall &c) { c.v.dims[3] = 6; },
       kShape,
       {"head_dim"}},
      {"k_batch_differs",
       [](BadCall &c) { c.k.dims[0] = 1; },
       kShape,
       {"k", "batch"}},
      {"v_batch_differs",
       [](BadCall &c) { c.v.dims[0] = 1; },
       kShape,
       {"v", "batch"}},
      {"out_batch_differs",
       [](BadCall &c) { c.out.dims[0] = 1; },
       kShape,
       {"out", "batch"}},
      {"v_seq_differs_from_k",
       [](BadCall &c) { c.v.dims[1] = 4; },
       kShape,
       {"v", "seq"}},
      {"v_heads_differ_from_k",
       [](BadCall &c) { c.v.dims[2] = 1; },
       kShape,
       {"v", "heads"}},
      {"out_seq_differs_from_q",
       [](BadCall &c) { c.out.dims[1] = 2; },
       kShape,
       {"out", "seq"}},
      {"out_heads_differ_from_q",
       [](BadCall &c) { c.out.dims[2] = 2; },
       kShape,
       {"out", "heads"}},
  };
}

std::vector<BadCallCase> LayoutCases() {
  std::vector<BadCallCase> cases;
  for (const Named &t : kTensors) {
    for (int64_t stride : {int64_t{0}, int64_t{2}, int64_t{-1}})
      cases.push_back(
          {std::string(t.name) + "_head_dim_stride_" +
               (stride < 0 ? "negative" : std::to_string(stride)),
           [t, stride](BadCall &c) { (c.*t.tensor).strides[3] = stride; },
           kLayout,
           {t.name, "head_dim"}});
    for (int d = 0; d < 3; d++)
      cases.push_back(
          {std::string(t.name) + "_negative_stride_" + std::to_string(d),
           [t, d](BadCall &c) {
             (c.*t.tensor).strides[d] = -(c.*t.tensor).strides[d];
           },
           kLayout,
           {t.name, "negative"}});
  }
  // Distinct (batch, row, head) of out must be distinct memory.
  cases.push_back({"out_heads_share_a_row",
                   [](BadCall &c) { c.out.strides[2] = 0; },
                   kLayout,
                   {"out"}});
  cases.push_back({"out_rows_overlap_by_one",
                   [](BadCall &c) { c.out.strides[2] = c.out.dims[3] - 1; },
                   kLayout,
                   {"out"}});
  cases.push_back({"out_seq_equals_head_stride",
                   [](BadCall &c) { c.out.strides[1] = c.out.strides[2]; },
                   kLayout,
                   {"out"}});
  cases.push_back({"out_batches_share_memory",
                   [](BadCall &c) { c.out.strides[0] = 0; },
                   kLayout,
                   {"out"}});
  return cases;
}

std::vector<BadCallCase> OverlapCases() {
  return {
      {"out_is_q",
       [](BadCall &c) { c.out.data = c.q.data; },
       kOverlap,
       {"out", "q"}},
      {"out_inside_k",
       [](BadCall &c) { c.out.data = c.k_data() + 13; },
       kOverlap,
       {"out", "k"}},
      {"out_ends_inside_v",
       [](BadCall &c) {
         c.out.data = c.v_data() - (BadCall::kBatch * BadCall::kQLen *
                                        BadCall::kQHeads * BadCall::kHeadDim -
                                    1);
       },
       kOverlap,
       {"out", "v"}},
      {"out_over_additive_mask",
       [](BadCall &c) { c.out.data = c.additive_data() + 4; },
       kOverlap,
       {"out", "additive"}},
      {"out_over_tree_mask",
       [](BadCall &c) { c.out.data = c.tree_data(); },
       kOverlap,
       {"out", "tree"}},
      {"out_over_kv_lengths",
       [](BadCall &c) { c.out.data = c.kv_lengths; },
       kOverlap,
       {"out", "kv_lengths"}},
      {"lse_inside_q",
       [](BadCall &c) { c.lse = c.q_data() + 5; },
       kOverlap,
       {"lse", "q"}},
      {"lse_over_out",
       [](BadCall &c) { c.lse = c.out_data() + 1; },
       kOverlap,
       {"lse", "out"}},
      {"lse_over_additive_mask",
       [](BadCall &c) { c.lse = c.additive_data(); },
       kOverlap,
       {"lse", "additive"}},
      {"lse_over_v",
       [](BadCall &c) { c.lse = c.v_data(); },
       kOverlap,
       {"lse", "v"}},
  };
}

std::vector<BadCallCase> OverflowCases() {
  constexpr int64_t kHuge = int64_t{1} << 40;
  return {
      {"q_span_overflows",
       [](BadCall &c) {
         c.q.dims[1] = kHuge;
         c.q.strides[1] = kHuge;
       },
       kOverflow,
       {"q"}},
      {"k_span_overflows",
       [](BadCall &c) { c.k.strides[0] = INT64_MAX / 2 + 1; },
       kOverflow,
       {"k"}},
      {"v_bytes_overflow",
       [](BadCall &c) { c.v.strides[1] = INT64_MAX / 8; },
       kOverflow,
       {"v"}},
      {"out_span_overflows",
       [](BadCall &c) {
         c.q.dims[1] = c.out.dims[1] = kHuge;
         c.q.strides[1] = 0; // q broadcasts its rows; out cannot
         c.out.strides[0] = kHuge;
         c.out.strides[1] = kHuge;
         c.params.tree_mask = nullptr;
         c.params.additive_mask = nullptr;
       },
       kOverflow,
       {"out"}},
      {"additive_mask_span_overflows",
       [](BadCall &c) { c.additive.strides[0] = INT64_MAX / 2; },
       kOverflow,
       {"additive"}},
      {"tree_mask_span_overflows",
       [](BadCall &c) { c.tree.batch_stride = INT64_MAX / 2; },
       kOverflow,
       {"tree"}},
      // out fits in int64 as f16 with head_dim 1, but lse (4 bytes a row) does
      // not.
      {"lse_size_overflows",
       [](BadCall &c) {
         const int64_t rows = int64_t{3} << 59;
         c.params.tree_mask = nullptr;
         c.params.additive_mask = nullptr;
         c.q = flashcpu_tensor_bshd(c.q_data(), FLASHCPU_DTYPE_F32, 1, rows, 2,
                                    1);
         c.q.strides[0] = c.q.strides[1] = c.q.strides[2] = 0;
         c.k = flashcpu_tensor_bshd(c.k_data(), FLASHCPU_DTYPE_F32, 1, 1, 1, 1);
         c.v = flashcpu_tensor_bshd(c.v_data(), FLASHCPU_DTYPE_F32, 1, 1, 1, 1);
         c.out = flashcpu_tensor_bshd(c.out_data(), FLASHCPU_DTYPE_F16, 1, rows,
                                      2, 1);
         c.params.kv_lengths = nullptr;
       },
       kOverflow,
       {"lse"}},
  };
}

std::vector<BadCallCase> DtypeCases() {
  std::vector<BadCallCase> cases;
  for (const Named &t : kTensors)
    for (int value : {8, -1, 255})
      cases.push_back(
          {std::string(t.name) + "_dtype_" +
               (value < 0 ? "minus1" : std::to_string(value)),
           [t, value](BadCall &c) { fctest_set_dtype(&(c.*t.tensor), value); },
           kDtype,
           {t.name, "dtype"}});
  return cases;
}

class TensorErrors : public testing::TestWithParam<BadCallCase> {};
TEST_P(TensorErrors, RejectedWithStatusMessageAndNoWrites) {
  ExpectRejected(GetParam());
}

INSTANTIATE_TEST_SUITE_P(NullPointer, TensorErrors,
                         testing::ValuesIn(NullPointerCases()),
                         BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(Dims, TensorErrors, testing::ValuesIn(DimCases()),
                         BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(Shapes, TensorErrors, testing::ValuesIn(ShapeCases()),
                         BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(Layout, TensorErrors, testing::ValuesIn(LayoutCases()),
                         BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(Overlap, TensorErrors,
                         testing::ValuesIn(OverlapCases()), BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(Overflow, TensorErrors,
                         testing::ValuesIn(OverflowCases()), BadCallCaseName);
INSTANTIATE_TEST_SUITE_P(Dtype, TensorErrors, testing::ValuesIn(DtypeCases()),
                         BadCallCaseName);

} // namespace
} // namespace fctest
