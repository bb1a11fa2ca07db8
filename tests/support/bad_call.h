// A valid flashcpu_attention call (with every option in use) that a test
// breaks in one way, then runs, checking the status, that the message
// names the problem, and that nothing was written: out, lse and every input
// are compared byte for byte with their contents before the call.
#ifndef FLASHCPU_TESTS_BAD_CALL_H
#define FLASHCPU_TESTS_BAD_CALL_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flashcpu/flashcpu.h"

namespace fctest {

// Every buffer the call may point into lives in one arena, so that tests can
// point out or lse into an input (overlap) without leaving owned memory.
struct BadCall {
  static constexpr int64_t kBatch = 2, kQLen = 3, kKvLen = 5, kQHeads = 4,
                           kKvHeads = 2, kHeadDim = 8, kTreeKeys = 3;

  BadCall();
  BadCall(const BadCall &) = delete;
  BadCall &operator=(const BadCall &) = delete;

  // Pointers into the arena, in floats.
  float *q_data();
  float *k_data();
  float *v_data();
  float *out_data();
  float *lse_data();
  float *additive_data();
  uint64_t *tree_data();

  flashcpu_status Run();

  flashcpu_context *ctx; // a fresh context; Run uses `call_ctx`
  flashcpu_context *call_ctx;
  flashcpu_tensor q, k, v, out;
  float *lse;
  flashcpu_attention_params params;
  bool pass_params = true;
  flashcpu_tree_mask tree;
  flashcpu_additive_mask additive;
  int64_t *kv_lengths; // kBatch values, in the arena
  std::vector<float> arena;

  ~BadCall();
};

struct BadCallCase {
  std::string name;
  std::function<void(BadCall &)> breaks;
  flashcpu_status status;
  // Words the message must contain, each as a whole word ("q" matches
  // "q->dims[1]" but not "seq").
  std::vector<std::string> words;
};

// Whether text contains word with no letter, digit or '_' either side.
bool ContainsWord(const std::string &text, const std::string &word);

// Runs the case and checks everything described above.
void ExpectRejected(const BadCallCase &c);

std::string BadCallCaseName(const testing::TestParamInfo<BadCallCase> &info);

} // namespace fctest

#endif // FLASHCPU_TESTS_BAD_CALL_H
