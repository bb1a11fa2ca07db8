// AttentionCase::CheckPagedMatches: the same problem through the paged API.
#include "attention_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "attention_case_internal.h"

namespace fctest {
using namespace attention_case_detail;

testing::AssertionResult
AttentionCase::CheckPagedMatches(flashcpu_context *ctx) {
  // A paged cache holds K and V apart, and packed q rows are distinct.
  if (values_alias_keys_ || queries_share_one_row_)
    return testing::AssertionSuccess()
           << "skipped: aliased inputs have no paged form";
  const int64_t B = batch_, L = q_len_, T = B * L, Hq = q_heads_,
                Hkv = kv_heads_;
  const int64_t D = head_dim_, Dv = v_head_dim_;

  // The page size and layout, from the seed and the shape.
  uint64_t hash = seed_;
  for (int64_t value :
       {B, L, kv_len_, Hq, Hkv, D, Dv, static_cast<int64_t>(q_dtype_),
        static_cast<int64_t>(k_dtype_), static_cast<int64_t>(v_dtype_),
        static_cast<int64_t>(out_dtype_), static_cast<int64_t>(layout_)})
    hash = Rng(hash ^ static_cast<uint64_t>(value)).NextU64();
  const int64_t page_size = kPageSizes[hash % 4];
  const bool hnd = (hash >> 2) % 2 == 1;

  // Every batch's pages, in a random order over the pool, and two spare
  // pages (the pool's free ones) that pad the block table's rows.
  int64_t used_pages = 0, widest = 0;
  for (int64_t b = 0; b < B; b++) {
    const int64_t pages = (kv_length_of(b) + page_size - 1) / page_size;
    used_pages += pages;
    widest = std::max(widest, pages);
  }
  const int64_t num_pages = used_pages + 2;
  std::vector<int32_t> order(static_cast<size_t>(num_pages));
  for (size_t n = 0; n < order.size(); n++) order[n] = static_cast<int32_t>(n);
  Rng rng(hash);
  for (size_t n = order.size() - 1; n > 0; n--)
    std::swap(
        order[n],
        order[static_cast<size_t>(rng.Below(static_cast<int64_t>(n) + 1))]);
  const int64_t table_stride = widest + 1;
  std::vector<int32_t> block_table(static_cast<size_t>(B * table_stride),
                                   order.back());
  std::vector<int32_t> cu_seqlens_q(static_cast<size_t>(B + 1)),
      seq_lens_kv(static_cast<size_t>(B));
  size_t next_page = 0;
  for (int64_t b = 0; b < B; b++) {
    cu_seqlens_q[static_cast<size_t>(b + 1)] =
        static_cast<int32_t>((b + 1) * L);
    seq_lens_kv[static_cast<size_t>(b)] = static_cast<int32_t>(kv_length_of(b));
    for (int64_t page = 0; page * page_size < kv_length_of(b); page++)
      block_table[static_cast<size_t>(b * table_stride + page)] =
          order[next_page++];
  }

  // The pool, NaN where no row was written, then each batch's rows.
  const Layout page_layout = hnd ? Layout::kBHSD : Layout::kBSHD;
  TestTensor k_pages(k_dtype_, {num_pages, page_size, Hkv, D}, page_layout,
                     page_size);
  TestTensor v_pages(v_dtype_, {num_pages, page_size, Hkv, Dv}, page_layout,
                     page_size);
  const flashcpu_tensor k = k_.View(), v = v_.View(), kp = k_pages.View(),
                        vp = v_pages.View();
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < kv_length_of(b); j++) {
      const int64_t page =
          block_table[static_cast<size_t>(b * table_stride + j / page_size)];
      for (int64_t h = 0; h < Hkv; h++) {
        std::memcpy(RowAt(kp, page, j % page_size, h), RowAt(k, b, j, h),
                    static_cast<size_t>(D) * ElementBytes(k_dtype_));
        std::memcpy(RowAt(vp, page, j % page_size, h), RowAt(v, b, j, h),
                    static_cast<size_t>(Dv) * ElementBytes(v_dtype_));
      }
    }
  flashcpu_paged_kv cache;
  flashcpu_paged_kv_init(&cache);
  cache.k = kp.data;
  cache.v = vp.data;
  cache.k_dtype = k_dtype_;
  cache.v_dtype = v_dtype_;
  cache.num_pages = num_pages;
  cache.page_size = page_size;
  cache.kv_heads = Hkv;
  cache.head_dim = D;
  cache.v_head_dim = Dv;
  for (int d = 0; d < 3; d++) {
    cache.k_strides[d] = kp.strides[d];
    cache.v_strides[d] = vp.strides[d];
  }

  // Packed query rows, and a poisoned packed out with padded rows.
  TestTensor q_packed(q_dtype_, {1, T, Hq, D}, Layout::kBSHD, T);
  TestTensor out_packed(out_dtype_, {1, T, Hq, Dv}, Layout::kUnaligned, T);
  const flashcpu_tensor q = QView(), qp = q_packed.View(),
                        op = out_packed.View();
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < L; i++)
      for (int64_t h = 0; h < Hq; h++)
        std::memcpy(RowAt(qp, 0, b * L + i, h), RowAt(q, b, i, h),
                    static_cast<size_t>(D) * ElementBytes(q_dtype_));
  std::vector<float> lse_packed(static_cast<size_t>(Hq * T + 2 * kLseGuard),
                                NAN);

  flashcpu_batch batch;
  flashcpu_batch_init(&batch);
  batch.num_requests = B;
  batch.cu_seqlens_q = cu_seqlens_q.data();
  batch.seq_lens_kv = seq_lens_kv.data();
  batch.block_table = block_table.data();
  batch.block_table_stride = table_stride;
  // Tree masks: each request's rows, packed; the padding word comes along.
  std::vector<uint64_t> tree_bits;
  std::vector<int32_t> tree_num_keys;
  flashcpu_tree_mask packed_tree = {};
  if (params_.tree_mask) {
    const int64_t words = tree_.row_stride;
    tree_bits.resize(static_cast<size_t>(std::max<int64_t>(T, 1) * words));
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < L; i++)
        std::memcpy(&tree_bits[static_cast<size_t>((b * L + i) * words)],
                    &tree_bits_[static_cast<size_t>(b * tree_.batch_stride +
                                                    i * words)],
                    static_cast<size_t>(words) * sizeof(uint64_t));
    tree_num_keys.assign(static_cast<size_t>(B),
                         static_cast<int32_t>(tree_.num_keys));
    packed_tree = {tree_bits.data(), T, tree_.num_keys, words, 0};
    batch.tree_mask = &packed_tree;
    batch.tree_num_keys = tree_num_keys.data();
  }

  // The additive mask in the paged layout (packed rows; see the header),
  // keeping the pattern's broadcasts where packed rows can express them.
  flashcpu_attention_params params = params_;
  params.kv_lengths = nullptr;
  params.tree_mask = nullptr;
  std::vector<float> mask_values;
  flashcpu_additive_mask mask{};
  if (params_.additive_mask) {
    int64_t longest = 1;
    for (int64_t b = 0; b < B; b++)
      longest = std::max(longest, kv_length_of(b));
    const int64_t padded = longest + 2;
    int64_t *st = mask.strides;
    const auto set_strides = [st](int64_t request, int64_t head, int64_t row,
                                  int64_t key) {
      st[0] = request;
      st[1] = head;
      st[2] = row;
      st[3] = key;
    };
    switch (additive_pattern_) {
    case AdditivePattern::kFull:
    case AdditivePattern::kBroadcastBatch: // packed rows differ per request
      set_strides(0, T * padded, padded, 1);
      break;
    case AdditivePattern::kBroadcastHeads:
      set_strides(0, 0, padded, 1);
      break;
    case AdditivePattern::kKeyPadding:
      set_strides(padded, 0, 0, 1);
      break;
    case AdditivePattern::kKeyMajor:
      set_strides(0, T * longest, 1, std::max<int64_t>(T, 1));
      break;
    }
    const int64_t extent = (B - 1) * st[0] + (Hq - 1) * st[1] +
                           (std::max<int64_t>(T, 1) - 1) * st[2] +
                           (longest - 1) * st[3] + 1;
    mask_values.assign(static_cast<size_t>(extent), NAN);
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < Hq; h++)
        for (int64_t i = 0; i < L; i++)
          for (int64_t j = 0; j < kv_length_of(b); j++)
            mask_values[static_cast<size_t>(b * st[0] + h * st[1] +
                                            (b * L + i) * st[2] + j * st[3])] =
                additive_at(b, h, i, j);
    mask.data = mask_values.data();
    params.additive_mask = &mask;
  }

  std::ostringstream where;
  where << "paged (pages of " << page_size << (hnd ? ", HND" : ", NHD") << ", "
        << num_pages << " pages); " << Describe();
  if (std::getenv("FCTEST_STATS"))
    std::printf("STATS paged page_size %lld %s\n",
                static_cast<long long>(page_size), hnd ? "hnd" : "nhd");
  flashcpu_plan *plan = nullptr;
  flashcpu_status status = flashcpu_plan_create(
      ctx, &batch, Hq, q_dtype_, out_.View().dtype, &cache, &plan);
  if (status != FLASHCPU_OK) {
    const std::string error = flashcpu_last_error(ctx);
    // A forced split-KV kernel takes a bounded number of rows per request;
    // the contiguous call took the case, so this is only a plan's refusal.
    if (status == FLASHCPU_ERROR_INVALID_ARGUMENT &&
        error.find("the forced kernel") != std::string::npos)
      return testing::AssertionSuccess() << "skipped: " << error;
    return testing::AssertionFailure()
           << "flashcpu_plan_create: " << flashcpu_status_name(status) << ": "
           << error << "; " << where.str();
  }
  const std::vector<unsigned char> k_pages_before = k_pages.bytes(),
                                   v_pages_before = v_pages.bytes(),
                                   q_packed_before = q_packed.bytes(),
                                   out_packed_before = out_packed.bytes();
  const std::vector<float> mask_before = mask_values;
  status = flashcpu_attention_paged(
      ctx, plan, &qp, &cache, &op,
      with_lse_ ? lse_packed.data() + kLseGuard : nullptr, &params);
  flashcpu_plan_destroy(plan);
  if (status != FLASHCPU_OK)
    return testing::AssertionFailure()
           << "flashcpu_attention_paged: " << flashcpu_status_name(status)
           << ": " << flashcpu_last_error(ctx) << "; " << where.str();

  if (k_pages.bytes() != k_pages_before || v_pages.bytes() != v_pages_before ||
      q_packed.bytes() != q_packed_before ||
      !SameFloats(mask_values, mask_before))
    return testing::AssertionFailure()
           << "an input of the paged call changed; " << where.str();
  const std::string outside = CompareOutsideView(
      out_packed_before, out_packed.bytes(), out_packed.ViewBytes());
  if (!outside.empty())
    return testing::AssertionFailure()
           << "paged out: " << outside << "; " << where.str();
  for (int64_t g = 0; g < kLseGuard; g++)
    if (!SameBits(lse_packed[static_cast<size_t>(g)], NAN) ||
        !SameBits(lse_packed[static_cast<size_t>(kLseGuard + Hq * T + g)], NAN))
      return testing::AssertionFailure()
             << "a paged write landed outside lse; " << where.str();

  const flashcpu_tensor out = out_.View();
  const size_t row_bytes = static_cast<size_t>(Dv) * ElementBytes(out_dtype_);
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < L; i++)
      for (int64_t h = 0; h < Hq; h++) {
        const int64_t t = b * L + i;
        if (std::memcmp(RowAt(out, b, i, h), RowAt(op, 0, t, h), row_bytes) !=
            0) {
          int64_t d = 0;
          while (d < Dv &&
                 std::memcmp(
                     RowAt(out, b, i, h) +
                         d * static_cast<int64_t>(ElementBytes(out_dtype_)),
                     RowAt(op, 0, t, h) +
                         d * static_cast<int64_t>(ElementBytes(out_dtype_)),
                     ElementBytes(out_dtype_)) == 0)
            d++;
          return testing::AssertionFailure()
                 << "out row (b=" << b << ", i=" << i << ", h=" << h
                 << ") differs from the "
                 << "contiguous call's bytes at d=" << d << ": "
                 << out_.Get(b, i, h, d) << " contiguous, "
                 << out_packed.Get(0, t, h, d) << " paged; " << where.str();
        }
        const float paged_lse =
            lse_packed[static_cast<size_t>(kLseGuard + h * T + t)];
        if (!SameBits(lse_at(b, h, i), paged_lse))
          return testing::AssertionFailure()
                 << "lse (b=" << b << ", h=" << h << ", i=" << i
                 << ") differs: " << lse_at(b, h, i) << " contiguous, "
                 << paged_lse << " paged; " << where.str();
      }
  return testing::AssertionSuccess();
}

} // namespace fctest
