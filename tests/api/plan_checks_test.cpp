// What flashcpu_plan_create refuses for the cache description alone (the
// checks the later calls make), and plans tied to their context's identity
// rather than its address.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "paged_call.h"

namespace fctest {
namespace {

// Creates the call's plan with kv changed by edit; the status, and the
// message in *message.
template <typename Edit>
flashcpu_status PlanWith(Edit edit, std::string *message) {
  PagedCall call;
  edit(call.kv);
  const flashcpu_status status = call.CreatePlan();
  *message = flashcpu_last_error(call.ctx);
  EXPECT_EQ(call.plan, nullptr);
  return status;
}

TEST(PlanChecks, UnknownCacheDtypeIsRefused) {
  std::string message;
  EXPECT_EQ(PlanWith(
                [](flashcpu_paged_kv &kv) {
                  kv.k_dtype = static_cast<flashcpu_dtype>(99);
                },
                &message),
            FLASHCPU_ERROR_UNSUPPORTED_DTYPE);
  EXPECT_NE(message.find("kv->k_dtype is 99"), std::string::npos) << message;
}

TEST(PlanChecks, NegativePageStrideIsRefused) {
  std::string message;
  EXPECT_EQ(
      PlanWith([](flashcpu_paged_kv &kv) { kv.v_strides[0] = -64; }, &message),
      FLASHCPU_ERROR_BAD_LAYOUT);
  EXPECT_NE(message.find("kv->v_strides[0] (page) is -64"), std::string::npos)
      << message;
}

TEST(PlanChecks, SlotCountOverflowingInt64IsRefused) {
  std::string message;
  EXPECT_EQ(PlanWith(
                [](flashcpu_paged_kv &kv) {
                  kv.num_pages = INT64_MAX / 2;
                  kv.page_size = 4;
                },
                &message),
            FLASHCPU_ERROR_SIZE_OVERFLOW);
  EXPECT_NE(message.find("num_pages * kv->page_size overflows int64"),
            std::string::npos)
      << message;
}

TEST(PlanChecks, PagesPastTheAddressRangeAreRefused) {
  std::string message;
  EXPECT_EQ(
      PlanWith([](flashcpu_paged_kv &kv) { kv.k_strides[0] = INT64_MAX / 2; },
               &message),
      FLASHCPU_ERROR_SIZE_OVERFLOW);
  EXPECT_NE(message.find("kv->k's pages reach past"), std::string::npos)
      << message;
}

// The plan reads no data: a description without pointers still plans.
TEST(PlanChecks, DescriptionWithoutDataPlans) {
  PagedCall call;
  call.kv.k = call.kv.v = nullptr;
  EXPECT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
}

// A context created where a destroyed one lived does not take its plans.
TEST(PlanChecks, PlanOfADestroyedContextIsRefusedByItsSuccessor) {
  PagedCall call;
  ASSERT_EQ(call.CreatePlan(), FLASHCPU_OK) << flashcpu_last_error(call.ctx);
  flashcpu_context *old_address = call.ctx;
  flashcpu_context_destroy(call.ctx);
  call.ctx = nullptr;
  // The allocator hands freed blocks back: try until one reuses the address.
  flashcpu_context *successor = nullptr;
  for (int attempt = 0; attempt < 64 && !successor; attempt++) {
    flashcpu_context *created = nullptr;
    ASSERT_EQ(flashcpu_context_create(nullptr, &created), FLASHCPU_OK);
    if (created == old_address)
      successor = created;
    else
      flashcpu_context_destroy(created);
  }
  if (!successor)
    GTEST_SKIP() << "no new context was allocated at the old address";
  call.ctx = call.call_ctx = successor;
  const Snapshot before(call);
  EXPECT_EQ(call.Run(), FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_last_error(successor)).find("another context"),
            std::string::npos)
      << flashcpu_last_error(successor);
  EXPECT_TRUE(before.Same(call));
}

} // namespace
} // namespace fctest
