// What the merge tests share: one key range's result, and the merge of
// every range's result into an AttentionCase's out and lse (which the
// case's oracle check then reads).
#ifndef FLASHCPU_TESTS_API_MERGED_PARTS_H
#define FLASHCPU_TESTS_API_MERGED_PARTS_H

#include <cstdint>
#include <vector>

#include "attention_case.h"

namespace fctest {

// One range's result: its out (own dtype) and lse.
struct Part {
  TestTensor out;
  std::vector<float> lse;
};

// Merges the parts into c's out and lse with flashcpu_merge_states.
inline flashcpu_status MergeIntoCase(AttentionCase &c, std::vector<Part> &parts,
                                     flashcpu_context *ctx) {
  constexpr int64_t kLseGuard = 16; // floats before lse in AttentionCase
  std::vector<flashcpu_tensor> states;
  std::vector<const float *> lses;
  for (Part &part : parts) {
    states.push_back(part.out.View());
    lses.push_back(part.lse.data());
  }
  c.out_for_checker_tests().Poison();
  const flashcpu_tensor out = c.out_for_checker_tests().View();
  return flashcpu_merge_states(ctx, static_cast<int64_t>(states.size()),
                               states.data(), lses.data(), &out,
                               &c.lse_storage_for_checker_tests(kLseGuard));
}

} // namespace fctest

#endif
