#include "bad_call.h"

#include <cctype>
#include <cstring>

namespace fctest {
namespace {

// Arena layout, in floats; each region is far larger than its view needs,
// so that a broken view's span stays inside the arena.
constexpr int64_t kRegion = 4096;
enum Region {
  kQ,
  kK,
  kV,
  kOut,
  kLse,
  kAdditive,
  kTree,
  kLengths,
  kRegionCount
};

} // namespace

bool ContainsWord(const std::string &text, const std::string &word) {
  auto is_word_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (size_t at = text.find(word); at != std::string::npos;
       at = text.find(word, at + 1)) {
    const bool starts =
        at == 0 || !is_word_char(text[at - 1]) || !is_word_char(word.front());
    const size_t end = at + word.size();
    const bool ends = end == text.size() || !is_word_char(text[end]) ||
                      !is_word_char(word.back());
    if (starts && ends) return true;
  }
  return false;
}

BadCall::BadCall() : arena(static_cast<size_t>(kRegion * kRegionCount)) {
  flashcpu_context_create(nullptr, &ctx);
  call_ctx = ctx;
  // Recognisable bytes everywhere: nothing the call reads is NaN, and any
  // write shows up as a changed byte.
  std::memset(arena.data(), 0x3c, arena.size() * sizeof(float));
  q = flashcpu_tensor_bshd(q_data(), FLASHCPU_DTYPE_F32, kBatch, kQLen, kQHeads,
                           kHeadDim);
  k = flashcpu_tensor_bshd(k_data(), FLASHCPU_DTYPE_F32, kBatch, kKvLen,
                           kKvHeads, kHeadDim);
  v = flashcpu_tensor_bshd(v_data(), FLASHCPU_DTYPE_F32, kBatch, kKvLen,
                           kKvHeads, kHeadDim);
  out = flashcpu_tensor_bshd(out_data(), FLASHCPU_DTYPE_F32, kBatch, kQLen,
                             kQHeads, kHeadDim);
  lse = lse_data();
  kv_lengths = reinterpret_cast<int64_t *>(arena.data() + kLengths * kRegion);
  kv_lengths[0] = kKvLen;
  kv_lengths[1] = kTreeKeys + 1;

  flashcpu_attention_params_init(&params);
  params.flags = FLASHCPU_FLAG_CAUSAL;
  params.window_left = 2;
  params.window_right = 1;
  params.softcap = 5.0f;
  params.scale = 0.25f;
  tree.bits = tree_data();
  tree.num_rows = kQLen;
  tree.num_keys = kTreeKeys;
  tree.row_stride = 1;
  tree.batch_stride = kQLen;
  params.tree_mask = &tree;
  additive.data = additive_data();
  additive.strides[0] = kQHeads * kQLen * kKvLen;
  additive.strides[1] = kQLen * kKvLen;
  additive.strides[2] = kKvLen;
  additive.strides[3] = 1;
  params.additive_mask = &additive;
  params.kv_lengths = kv_lengths;
}

BadCall::~BadCall() { flashcpu_context_destroy(ctx); }

float *BadCall::q_data() { return arena.data() + kQ * kRegion; }
float *BadCall::k_data() { return arena.data() + kK * kRegion; }
float *BadCall::v_data() { return arena.data() + kV * kRegion; }
float *BadCall::out_data() { return arena.data() + kOut * kRegion; }
float *BadCall::lse_data() { return arena.data() + kLse * kRegion; }
float *BadCall::additive_data() { return arena.data() + kAdditive * kRegion; }
uint64_t *BadCall::tree_data() {
  return reinterpret_cast<uint64_t *>(arena.data() + kTree * kRegion);
}

flashcpu_status BadCall::Run() {
  return flashcpu_attention(call_ctx, &q, &k, &v, &out, lse,
                            pass_params ? &params : nullptr);
}

void ExpectRejected(const BadCallCase &c) {
  BadCall call;
  c.breaks(call);
  const std::vector<float> arena_before = call.arena;
  const flashcpu_status status = call.Run();
  EXPECT_EQ(status, c.status)
      << "got " << flashcpu_status_name(status) << ", expected "
      << flashcpu_status_name(c.status);
  const std::string message = flashcpu_last_error(call.call_ctx);
  for (const std::string &word : c.words)
    EXPECT_TRUE(ContainsWord(message, word))
        << "message \"" << message << "\" lacks \"" << word << "\"";
  EXPECT_EQ(std::memcmp(arena_before.data(), call.arena.data(),
                        arena_before.size() * sizeof(float)),
            0)
      << "out, lse or an input was written by a rejected call";
}

std::string BadCallCaseName(const testing::TestParamInfo<BadCallCase> &info) {
  return info.param.name;
}

} // namespace fctest
