// flashcpu_kv_append end to end: a sequence appended token by token
// (decode steps) and in chunks (prefill) fills the same pages, and
// attention through a plan over them writes the bytes flashcpu_attention
// writes on the contiguous K/V, for every kernel this CPU runs.
#include "kv_append_support.h"

namespace fctest {
using namespace kv_append;
namespace {

// ---------------------------------------------------------------------------
// End to end: appends fill pages that attention then reads.

// Three requests sharing a pool of pages in random order, 37, 0 and 20
// tokens long, their K and V also kept contiguous ([R, capacity, Hkv, D]).
struct Sequences {
  static constexpr int64_t kRequests = 3, kCapacity = 37, kQHeads = 4,
                           kKvHeads = 2, kDim = 16, kPageSize = 3,
                           kRowPages = (kCapacity + kPageSize - 1) / kPageSize,
                           kPages = 3 * kRowPages;
  const int64_t lengths[kRequests] = {37, 0, 20};

  explicit Sequences(flashcpu_dtype kv_dtype)
      : dtype(kv_dtype),
        k(static_cast<size_t>(kRequests * kCapacity * kKvHeads * kDim) *
          ElementBytes(kv_dtype)),
        v(k.size()) {
    Rng rng(2024);
    for (int64_t r = 0; r < kRequests; r++)
      for (int64_t j = 0; j < kCapacity; j++)
        for (int64_t e = 0; e < kKvHeads * kDim; e++) {
          // Rows past a request's length are never read: NaN shows if they are.
          const bool used = j < lengths[r];
          StoreAs(KRow(r, j) + e * size(), dtype,
                  used ? rng.NonZeroUnit() : NAN);
          StoreAs(VRow(r, j) + e * size(), dtype,
                  used ? rng.NonZeroUnit() : NAN);
        }
    std::vector<int32_t> pages(kPages);
    std::iota(pages.begin(), pages.end(), 0);
    for (size_t i = pages.size(); i > 1; i--)
      std::swap(pages[i - 1],
                pages[static_cast<size_t>(rng.Below(static_cast<int64_t>(i)))]);
    block_table = pages; // row r: entries r * kRowPages ..
  }
  int64_t size() const { return static_cast<int64_t>(ElementBytes(dtype)); }
  unsigned char *KRow(int64_t r, int64_t j) {
    return k.data() + ((r * kCapacity + j) * kKvHeads * kDim) * size();
  }
  unsigned char *VRow(int64_t r, int64_t j) {
    return v.data() + ((r * kCapacity + j) * kKvHeads * kDim) * size();
  }
  int64_t Slot(int64_t r, int64_t j) const {
    return block_table[static_cast<size_t>(r * kRowPages + j / kPageSize)] *
               kPageSize +
           j % kPageSize;
  }
  PagedCache EmptyCache() const {
    return PagedCache(dtype, dtype, kPages, kPageSize, kKvHeads, kDim, kDim,
                      PageLayout::kHnd);
  }

  flashcpu_dtype dtype;
  std::vector<unsigned char> k, v;
  std::vector<int32_t> block_table;
};

// Decode steps: step t appends token t of every request still that long,
// packed into one call as an engine would.
void AppendTokenByToken(flashcpu_context *ctx, Sequences &s,
                        PagedCache &cache) {
  for (int64_t t = 0; t < Sequences::kCapacity; t++) {
    std::vector<int64_t> active;
    for (int64_t r = 0; r < Sequences::kRequests; r++)
      if (t < s.lengths[r]) active.push_back(r);
    const int64_t n = static_cast<int64_t>(active.size());
    NewRows k(s.dtype, n, Sequences::kKvHeads, Sequences::kDim, false),
        v(s.dtype, n, Sequences::kKvHeads, Sequences::kDim, false);
    std::vector<int64_t> slots;
    const size_t row_bytes =
        static_cast<size_t>(Sequences::kKvHeads * Sequences::kDim * s.size());
    for (int64_t i = 0; i < n; i++) {
      std::memcpy(k.At(i, 0, 0), s.KRow(active[static_cast<size_t>(i)], t),
                  row_bytes);
      std::memcpy(v.At(i, 0, 0), s.VRow(active[static_cast<size_t>(i)], t),
                  row_bytes);
      slots.push_back(s.Slot(active[static_cast<size_t>(i)], t));
    }
    ASSERT_EQ(
        flashcpu_kv_append(ctx, &k.view, &v.view, slots.data(), &cache.view),
        FLASHCPU_OK)
        << "step " << t << ": " << flashcpu_last_error(ctx);
  }
}

// Prefill: each request's tokens in chunks of `chunk`, read in place from
// the contiguous K/V.
void AppendInChunks(flashcpu_context *ctx, Sequences &s, PagedCache &cache,
                    int64_t chunk) {
  for (int64_t r = 0; r < Sequences::kRequests; r++)
    for (int64_t start = 0; start < std::max<int64_t>(s.lengths[r], 1);
         start += chunk) {
      const int64_t n =
          std::min(chunk, s.lengths[r] - start); // 0 for the empty request
      flashcpu_tensor k =
          flashcpu_tensor_bshd(s.KRow(r, start), s.dtype, 1, n,
                               Sequences::kKvHeads, Sequences::kDim);
      flashcpu_tensor v =
          flashcpu_tensor_bshd(s.VRow(r, start), s.dtype, 1, n,
                               Sequences::kKvHeads, Sequences::kDim);
      std::vector<int64_t> slots;
      for (int64_t j = start; j < start + n; j++) slots.push_back(s.Slot(r, j));
      ASSERT_EQ(flashcpu_kv_append(ctx, &k, &v, n ? slots.data() : nullptr,
                                   &cache.view),
                FLASHCPU_OK)
          << "request " << r << " from " << start << ": "
          << flashcpu_last_error(ctx);
    }
}

TEST(AppendEndToEnd, TokenByTokenAndChunksFillTheSamePages) {
  Context context(DefaultOptions());
  for (flashcpu_dtype dtype : kDtypes) {
    SCOPED_TRACE(flashcpu_dtype_name(dtype));
    Sequences s(dtype);
    PagedCache decoded = s.EmptyCache(), prefilled = s.EmptyCache(),
               chunked = s.EmptyCache();
    AppendTokenByToken(context, s, decoded);
    AppendInChunks(context, s, prefilled, Sequences::kCapacity);
    AppendInChunks(context, s, chunked, 7);
    for (int side = 0; side < 2; side++) {
      EXPECT_EQ(decoded.bytes[side], prefilled.bytes[side]) << "side " << side;
      EXPECT_EQ(chunked.bytes[side], prefilled.bytes[side]) << "side " << side;
    }
    // Each token's rows are the contiguous rows, bit for bit.
    for (int64_t r = 0; r < Sequences::kRequests; r++)
      for (int64_t j = 0; j < s.lengths[r]; j++)
        for (int64_t h = 0; h < Sequences::kKvHeads; h++) {
          const size_t row = static_cast<size_t>(Sequences::kDim * s.size());
          ASSERT_EQ(
              std::memcmp(
                  &decoded.bytes[0][decoded.Offset(0, s.Slot(r, j), h, 0)],
                  s.KRow(r, j) + h * Sequences::kDim * s.size(), row),
              0)
              << "K of request " << r << " token " << j << " head " << h;
          ASSERT_EQ(
              std::memcmp(
                  &decoded.bytes[1][decoded.Offset(1, s.Slot(r, j), h, 0)],
                  s.VRow(r, j) + h * Sequences::kDim * s.size(), row),
              0)
              << "V of request " << r << " token " << j << " head " << h;
        }
  }
}

struct StepOptions {
  const char *name;
  int64_t rows; // L of every request
  bool every_option;
};

// Attention over the appended pages with a plan of R requests of L rows
// each equals flashcpu_attention on the contiguous K/V with kv_lengths (the
// same problem), byte for byte, with the same kernel.
TEST(AppendEndToEnd, AttentionOverAppendedPagesEqualsContiguousAttention) {
  constexpr int64_t R = Sequences::kRequests, Hq = Sequences::kQHeads,
                    D = Sequences::kDim;
  const StepOptions steps[] = {{"decode", 1, false},
                               {"verify", 5, false},
                               {"prefill", 20, false},
                               {"verify_every_option", 5, true},
                               {"prefill_every_option", 20, true}};
  struct Dtypes {
    flashcpu_dtype q, kv, out;
  };
  // One context per kernel, made once (a context starts threads).
  std::vector<const char *> kernels = RunnableKernelsThenDefault();
  std::vector<Context> contexts;
  for (const char *kernel : kernels) {
    contexts.emplace_back(KernelOptions(FLASHCPU_ISA_AUTO, kernel));
    ASSERT_TRUE(contexts.back().ok()) << (kernel ? kernel : "default") << ": "
                                      << flashcpu_last_error(nullptr);
  }
  for (const Dtypes &dtypes : {Dtypes{F32, F32, F32}, Dtypes{BF16, BF16, F16},
                               Dtypes{F16, F16, BF16}}) {
    Sequences s(dtypes.kv);
    PagedCache cache = s.EmptyCache();
    AppendTokenByToken(contexts.back(), s, cache);
    const int64_t kv_lengths[R] = {s.lengths[0], s.lengths[1], s.lengths[2]};
    const int32_t seq_lens[R] = {static_cast<int32_t>(s.lengths[0]),
                                 static_cast<int32_t>(s.lengths[1]),
                                 static_cast<int32_t>(s.lengths[2])};
    for (const StepOptions &step : steps) {
      const int64_t L = step.rows, T = R * L;
      // Packed q [1, T, Hq, D] is the same buffer as [R, L, Hq, D] BSHD.
      std::vector<unsigned char> q_bytes(static_cast<size_t>(T * Hq * D) *
                                         ElementBytes(dtypes.q));
      Rng rng(static_cast<uint64_t>(L) * 31 + dtypes.q);
      for (int64_t e = 0; e < T * Hq * D; e++)
        StoreAs(q_bytes.data() +
                    e * static_cast<int64_t>(ElementBytes(dtypes.q)),
                dtypes.q, rng.NonZeroUnit());
      const flashcpu_tensor q_packed =
          flashcpu_tensor_bshd(q_bytes.data(), dtypes.q, 1, T, Hq, D);
      const flashcpu_tensor q_batched =
          flashcpu_tensor_bshd(q_bytes.data(), dtypes.q, R, L, Hq, D);
      const flashcpu_tensor k = flashcpu_tensor_bshd(
          s.k.data(), s.dtype, R, Sequences::kCapacity, Sequences::kKvHeads, D);
      const flashcpu_tensor v = flashcpu_tensor_bshd(
          s.v.data(), s.dtype, R, Sequences::kCapacity, Sequences::kKvHeads, D);

      // Options: causal, and for every_option a window, softcap, sinks,
      // [R, Hq] ALiBi slopes and an additive mask (rows of [Hq, T, S]: the
      // contiguous call sees them through a batch stride of L rows).
      std::vector<uint16_t> sinks(Hq);
      std::vector<float> slopes(R * (Hq + 1)),
          additive(static_cast<size_t>(Hq * T * Sequences::kCapacity));
      for (uint16_t &sink : sinks)
        sink = EncodeBfloat16(rng.Uniform(-1.0, 2.0));
      for (float &slope : slopes)
        slope = static_cast<float>(rng.Uniform(0.01, 0.3));
      for (float &value : additive)
        value = rng.Chance(0.1) ? -INFINITY
                                : static_cast<float>(rng.Uniform(-1.0, 1.0));
      flashcpu_additive_mask packed_mask{
          additive.data(),
          {0, T * Sequences::kCapacity, Sequences::kCapacity, 1}};
      flashcpu_additive_mask batched_mask{additive.data(),
                                          {L * Sequences::kCapacity,
                                           T * Sequences::kCapacity,
                                           Sequences::kCapacity, 1}};
      flashcpu_attention_params paged_params, contiguous_params;
      flashcpu_attention_params_init(&paged_params);
      paged_params.flags = L > 1 ? FLASHCPU_FLAG_CAUSAL : 0u;
      if (step.every_option) {
        paged_params.window_left = 9;
        paged_params.window_right = 0;
        paged_params.softcap = 15.0f;
        paged_params.sinks = sinks.data();
        paged_params.sinks_dtype = BF16;
        paged_params.alibi_slopes = slopes.data();
        paged_params.alibi_batch_stride = Hq + 1;
      }
      contiguous_params = paged_params;
      contiguous_params.kv_lengths = kv_lengths;
      if (step.every_option) {
        paged_params.additive_mask = &packed_mask;
        contiguous_params.additive_mask = &batched_mask;
      }

      flashcpu_batch batch;
      flashcpu_batch_init(&batch);
      std::vector<int32_t> cu(R + 1);
      for (int64_t r = 0; r <= R; r++)
        cu[static_cast<size_t>(r)] = static_cast<int32_t>(r * L);
      batch.num_requests = R;
      batch.cu_seqlens_q = cu.data();
      batch.seq_lens_kv = seq_lens;
      batch.block_table = s.block_table.data();
      batch.block_table_stride = Sequences::kRowPages;

      const size_t out_bytes =
          static_cast<size_t>(T * Hq * D) * ElementBytes(dtypes.out);
      int compared = 0; // kernels that took the step
      for (size_t which = 0; which < kernels.size(); which++) {
        const char *kernel = kernels[which];
        SCOPED_TRACE(std::string(step.name) + " q " +
                     flashcpu_dtype_name(dtypes.q) + " kv " +
                     flashcpu_dtype_name(dtypes.kv) + " out " +
                     flashcpu_dtype_name(dtypes.out) + " on " +
                     (kernel ? kernel : "the default choice"));
        flashcpu_context *context = contexts[which];
        std::vector<unsigned char> contiguous_out(out_bytes, 0xee),
            paged_out(out_bytes, 0xdd);
        std::vector<float> contiguous_lse(static_cast<size_t>(T * Hq), 1.0f),
            paged_lse(contiguous_lse.size(), 2.0f);
        const flashcpu_tensor out_batched = flashcpu_tensor_bshd(
            contiguous_out.data(), dtypes.out, R, L, Hq, D);
        const flashcpu_tensor out_packed =
            flashcpu_tensor_bshd(paged_out.data(), dtypes.out, 1, T, Hq, D);
        const flashcpu_status contiguous_status =
            flashcpu_attention(context, &q_batched, &k, &v, &out_batched,
                               contiguous_lse.data(), &contiguous_params);
        if (kernel && contiguous_status == FLASHCPU_ERROR_INVALID_ARGUMENT)
          continue; // the kernel does not take it
        ASSERT_EQ(contiguous_status, FLASHCPU_OK)
            << flashcpu_last_error(context);
        flashcpu_plan *plan = nullptr;
        ASSERT_EQ(flashcpu_plan_create(context, &batch, Hq, dtypes.q,
                                       dtypes.out, &cache.view, &plan),
                  FLASHCPU_OK)
            << flashcpu_last_error(context);
        const flashcpu_status paged_status = flashcpu_attention_paged(
            context, plan, &q_packed, &cache.view, &out_packed,
            paged_lse.data(), &paged_params);
        flashcpu_plan_destroy(plan);
        ASSERT_EQ(paged_status, FLASHCPU_OK) << flashcpu_last_error(context);
        EXPECT_EQ(paged_out, contiguous_out);
        // lse: [Hq, T] packed, [R, Hq, L] contiguous.
        int64_t lse_mismatches = 0;
        for (int64_t r = 0; r < R; r++)
          for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < L; i++)
              lse_mismatches +=
                  std::memcmp(
                      &paged_lse[static_cast<size_t>(h * T + r * L + i)],
                      &contiguous_lse[static_cast<size_t>((r * Hq + h) * L +
                                                          i)],
                      sizeof(float)) != 0;
        EXPECT_EQ(lse_mismatches, 0);
        compared++;
      }
      // The default choice and at least one forced kernel: a catch-all row.
      EXPECT_GE(compared, 2) << step.name;
    }
  }
}

} // namespace
} // namespace fctest
