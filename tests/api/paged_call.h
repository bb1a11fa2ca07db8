// The valid paged step the paged API's tests break one thing at a time
// (paged_errors_test.cpp) or run through a plan's lifecycle
// (plan_lifecycle_test.cpp), and the helpers they share.
#ifndef FLASHCPU_TESTS_API_PAGED_CALL_H
#define FLASHCPU_TESTS_API_PAGED_CALL_H

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bad_call.h"
#include "flashcpu/flashcpu.h"

namespace fctest {

constexpr flashcpu_status kNull = FLASHCPU_ERROR_NULL_POINTER;
constexpr flashcpu_status kInvalid = FLASHCPU_ERROR_INVALID_ARGUMENT;
constexpr flashcpu_status kShape = FLASHCPU_ERROR_SHAPE_MISMATCH;
constexpr flashcpu_status kLayout = FLASHCPU_ERROR_BAD_LAYOUT;
constexpr flashcpu_status kOverlap = FLASHCPU_ERROR_OVERLAP;
constexpr flashcpu_status kDtype = FLASHCPU_ERROR_UNSUPPORTED_DTYPE;

// An unknown dtype stored the way a C caller can (an out-of-range enum
// value is undefined behaviour in C++, not in C).
// Scales for a cache that has none to scale (f32/f16/bf16 pages).
inline float kUnitScale = 1.0f;
inline const flashcpu_kv_scales kFloatCacheScales = {
    &kUnitScale, FLASHCPU_DTYPE_F32, {0, 0, 0, 0}, nullptr};

inline void SetRawDtype(flashcpu_dtype *field, int value) {
  static_assert(sizeof(flashcpu_dtype) == sizeof(int), "enum is an int");
  std::memcpy(field, &value, sizeof value);
}

// A kernel of the family that takes any dtype: the last runnable row of
// the family among the rows of the best ISA that runs one (the bf16-dot
// rows before it take bf16 q and k only). nullptr if none runs here.
inline const char *CatchAllKernel(const std::string &family) {
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  const char *chosen = nullptr;
  bool have_isa = false;
  flashcpu_isa isa = FLASHCPU_ISA_AUTO;
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++) {
    if (!info.runnable || family != info.family) continue;
    if (!have_isa) {
      have_isa = true;
      isa = info.isa;
    }
    if (info.isa == isa) chosen = info.name;
  }
  return chosen;
}

// ---------------------------------------------------------------------------
// A valid step: R = 3 requests (1, 3 and 2 rows; 5, 7 and 2 keys), pages of
// 4 tokens, Hq = 4 over Hkv = 2, D = Dv = 8, request 1 under a tree mask
// over its newest 3 keys. Every buffer a call may point into (q, pages, out,
// lse, sinks, slopes, mask) lies in one float arena preset to a pattern, so
// that a case can point out into an input and any write shows.
struct PagedCall {
  static constexpr int64_t kRequests = 3, kTokens = 6, kQHeads = 4,
                           kKvHeads = 2, kHeadDim = 8, kPages = 6,
                           kPageSize = 4, kMaxKeys = 7;
  static constexpr int64_t kRegion = 1024; // floats per arena region
  enum Region {
    kQ,
    kK,
    kV,
    kOut,
    kLse,
    kSinks,
    kAlibi,
    kAdditive,
    kRegionCount
  };

  PagedCall() : arena(static_cast<size_t>(kRegion * kRegionCount)) {
    flashcpu_context_create(nullptr, &ctx);
    call_ctx = ctx;
    std::memset(arena.data(), 0x3c,
                arena.size() * sizeof(float)); // 0.0115: no NaN read
    kv = flashcpu_paged_kv_nhd(region(kK), region(kV), FLASHCPU_DTYPE_F32,
                               kPages, kPageSize, kKvHeads, kHeadDim);
    q = flashcpu_tensor_bshd(region(kQ), FLASHCPU_DTYPE_F32, 1, kTokens,
                             kQHeads, kHeadDim);
    out = flashcpu_tensor_bshd(region(kOut), FLASHCPU_DTYPE_F32, 1, kTokens,
                               kQHeads, kHeadDim);
    lse = region(kLse);

    flashcpu_batch_init(&batch);
    batch.num_requests = kRequests;
    batch.cu_seqlens_q = cu_seqlens_q.data();
    batch.seq_lens_kv = seq_lens_kv.data();
    batch.block_table = block_table.data();
    batch.block_table_stride = 3;
    tree = {tree_bits.data(), kTokens, 3, 1, 0};
    batch.tree_mask = &tree;
    batch.tree_num_keys = tree_num_keys.data();

    flashcpu_attention_params_init(&params);
    params.flags = FLASHCPU_FLAG_CAUSAL;
    params.softcap = 20.0f;
    params.sinks = region(kSinks);
    params.sinks_dtype = FLASHCPU_DTYPE_F32;
    params.alibi_slopes = region(kAlibi);
    params.alibi_batch_stride = kQHeads + 1; // [R, Hq] with a padding float
    additive.data = region(kAdditive);
    additive.strides[0] = 0; // packed rows: no batch stride needed
    additive.strides[1] = kTokens * kMaxKeys;
    additive.strides[2] = kMaxKeys;
    additive.strides[3] = 1;
    params.additive_mask = &additive;
  }
  ~PagedCall() {
    flashcpu_plan_destroy(plan);
    flashcpu_context_destroy(ctx);
  }
  PagedCall(const PagedCall &) = delete;
  PagedCall &operator=(const PagedCall &) = delete;

  float *region(Region r) { return arena.data() + r * kRegion; }

  // The indptr form of the same block table (FlashInfer's).
  void UseBlockOffsets() {
    block_table = {4, 1, 0, 5, 2, 99};
    batch.block_table = block_table.data();
    batch.block_offsets = block_offsets.data();
  }

  flashcpu_status CreatePlan() {
    flashcpu_plan_destroy(plan);
    plan = nullptr;
    return flashcpu_plan_create(plan_ctx ? plan_ctx : ctx, &batch, q_heads,
                                q.dtype, out.dtype, &kv, &plan);
  }
  flashcpu_status Run() {
    return flashcpu_attention_paged(call_ctx, run_plan ? run_plan : plan, &q,
                                    &kv, &out, lse, &params);
  }

  flashcpu_context *ctx = nullptr;
  flashcpu_context *call_ctx = nullptr; // the context Run passes
  flashcpu_context *plan_ctx =
      nullptr; // the context CreatePlan uses (null: ctx)
  std::vector<float> arena;
  // Unused block-table entries hold values no request may read.
  std::vector<int32_t> cu_seqlens_q{0, 1, 4, 6}, seq_lens_kv{5, 7, 2},
      block_table{4, 1, 99, 0, 5, -7, 2, 99, 99}, block_offsets{0, 2, 4, 5},
      tree_num_keys{0, 3, 0};
  std::vector<uint64_t> tree_bits{~0ull, 0x5ull, 0x3ull, 0x7ull, ~0ull, ~0ull};
  flashcpu_tree_mask tree; // over tree_bits: 3 keys, one word a row
  flashcpu_batch batch;
  int64_t q_heads = kQHeads;
  flashcpu_paged_kv kv;
  flashcpu_tensor q, out;
  float *lse;
  flashcpu_attention_params params;
  flashcpu_additive_mask additive;
  flashcpu_plan *plan = nullptr;
  const flashcpu_plan *run_plan = nullptr; // what Run passes (null: plan)
};

// What a rejected call must leave unchanged.
struct Snapshot {
  explicit Snapshot(const PagedCall &c)
      : arena(c.arena), cu(c.cu_seqlens_q), lens(c.seq_lens_kv),
        table(c.block_table), offsets(c.block_offsets),
        tree_keys(c.tree_num_keys), tree_bits(c.tree_bits) {}
  bool Same(const PagedCall &c) const {
    return std::memcmp(arena.data(), c.arena.data(),
                       arena.size() * sizeof(float)) == 0 &&
           cu == c.cu_seqlens_q && lens == c.seq_lens_kv &&
           table == c.block_table && offsets == c.block_offsets &&
           tree_keys == c.tree_num_keys && tree_bits == c.tree_bits;
  }
  std::vector<float> arena;
  std::vector<int32_t> cu, lens, table, offsets, tree_keys;
  std::vector<uint64_t> tree_bits;
};

inline std::string MissingWords(const std::string &message,
                                const std::vector<std::string> &words) {
  std::string missing;
  for (const std::string &word : words)
    if (!ContainsWord(message, word)) missing += " \"" + word + "\"";
  return missing;
}

} // namespace fctest

#endif // FLASHCPU_TESTS_API_PAGED_CALL_H
