// One ragged paged step for the kernel tests (paged_ragged_test.cpp): the
// spec a step is drawn from, its requests, and PagedStep, which builds the
// pages, runs the step through a plan and checks every row against the
// float64 oracle on a contiguous copy of its request.
#ifndef FLASHCPU_TESTS_KERNELS_PAGED_STEP_H
#define FLASHCPU_TESTS_KERNELS_PAGED_STEP_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "kernel_tester.h"
#include "naive_attention.h"
#include "oracle.h"
#include "test_tensor.h"
#include "tolerance.h"

namespace fctest {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;
inline constexpr int64_t kLseGuard = 16;

enum class PageLayout {
  kNhd,       // [pages, page_size, Hkv, D]
  kHnd,       // [pages, Hkv, page_size, D]
  kOneBuffer, // [pages, 2, page_size, Hkv, D]: v = k + one block (D == Dv)
};
enum class MaskLayout {
  kNone,
  kPackedRows, // [Hq, T, keys]: batch stride 0, rows are packed rows
  kKeyPadding, // [R, keys]: per request and key only
};
enum class Alibi { kNone, kPerHead, kPerRequest };

// What a step is made of; Generate() draws its requests from the seed.
struct StepSpec {
  std::string name;
  int64_t q_heads = 8, kv_heads = 2, head_dim = 64, v_head_dim = 64;
  flashcpu_dtype q = F32, kv = F32, out = F32;
  int64_t page_size = 16;
  PageLayout layout = PageLayout::kNhd;
  bool block_offsets = false;  // FlashInfer's indptr instead of table rows
  bool strided_q = false;      // q rows padded apart
  bool head_major_out = false; // out [1, T, Hq, Dv] stored [Hq, T, Dv]
  // The mix.
  int decode = 4, verify = 3, trees = 1, prefill = 1, no_rows = 1, no_keys = 1;
  int64_t max_prefix = 150; // cached keys before a request's new rows
  int64_t min_prefill_rows = 20,
          max_prefill_rows = 64; // rows of a prefill chunk
  bool wide_tree = false;        // one tree over 70 keys (two words a row)
  bool rows_past_keys = false;   // a causal request with more rows than keys
  // Options.
  bool causal = true;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool sinks = false;
  flashcpu_dtype sinks_dtype = F32;
  Alibi alibi = Alibi::kNone;
  MaskLayout mask = MaskLayout::kNone;
  bool large = false; // scores near 300
  uint64_t seed = 1;
};

struct Request {
  int64_t rows, keys, tree_keys; // tree_keys 0: no tree
};

// The requests of a step, in batch order (shuffled kinds).
inline std::vector<Request> Generate(const StepSpec &spec) {
  Rng rng(spec.seed * 0x9e3779b97f4a7c15ull + 11);
  auto between = [&rng](int64_t low, int64_t high) {
    return low + rng.Below(high - low + 1);
  };
  std::vector<Request> requests;
  for (int i = 0; i < spec.decode; i++)
    requests.push_back({1, 1 + between(0, spec.max_prefix), 0});
  for (int i = 0; i < spec.verify; i++) {
    const int64_t rows = between(2, 16),
                  keys = rows + between(0, spec.max_prefix);
    int64_t tree_keys = 0;
    if (i < spec.trees)
      tree_keys = spec.wide_tree && i == 0 ? std::min<int64_t>(keys, 70) : rows;
    requests.push_back({rows, keys, tree_keys});
  }
  for (int i = 0; i < spec.prefill; i++) {
    const int64_t rows = between(spec.min_prefill_rows, spec.max_prefill_rows);
    requests.push_back({rows, rows + between(rows, rows + spec.max_prefix), 0});
  }
  for (int i = 0; i < spec.no_rows; i++)
    requests.push_back({0, between(0, 40), 0});
  for (int i = 0; i < spec.no_keys; i++)
    requests.push_back({between(1, 4), 0, 0});
  if (spec.rows_past_keys) requests.push_back({6, 3, 0});
  for (size_t i = requests.size(); i > 1; i--)
    std::swap(
        requests[i - 1],
        requests[static_cast<size_t>(rng.Below(static_cast<int64_t>(i)))]);
  return requests;
}

inline int64_t MaxRows(const std::vector<Request> &requests) {
  int64_t rows = 0;
  for (const Request &r : requests) rows = std::max(rows, r.rows);
  return rows;
}

// Whether the row can take every request of the step in one part: its
// family's row limit and its takes() on the step's dtypes and shape.
inline bool RowTakesStep(Kernel kernel, const StepSpec &spec,
                         std::string *why) {
  const int64_t rows = MaxRows(Generate(spec));
  fc_problem p{};
  p.batch = 1;
  p.q_len = rows;
  p.kv_capacity = 1;
  p.q_heads = spec.q_heads;
  p.kv_heads = spec.kv_heads;
  p.group = spec.q_heads / spec.kv_heads;
  p.head_dim = spec.head_dim;
  p.v_head_dim = spec.v_head_dim;
  p.q.dtype = spec.q;
  p.k.dtype = p.v.dtype = spec.kv;
  p.out.dtype = spec.out;
  p.causal = spec.causal;
  p.window_left = p.window_right = -1;
  char reason[256] = "";
  const bool takes = fc_kernel_takes(kernel, &p, reason, sizeof reason);
  if (why) *why = reason;
  return takes;
}

size_t Bytes(flashcpu_dtype dtype) { return ElementBytes(dtype); }

// One step: the requests, the pages, q, the options, and the buffers the
// call writes.
class PagedStep {
public:
  explicit PagedStep(const StepSpec &spec)
      : spec_(spec), requests_(Generate(spec)) {
    R_ = static_cast<int64_t>(requests_.size());
    cu_.assign(static_cast<size_t>(R_ + 1), 0);
    for (int64_t r = 0; r < R_; r++) {
      cu_[static_cast<size_t>(r + 1)] =
          cu_[static_cast<size_t>(r)] +
          static_cast<int32_t>(requests_[static_cast<size_t>(r)].rows);
      seq_lens_.push_back(
          static_cast<int32_t>(requests_[static_cast<size_t>(r)].keys));
      max_keys_ = std::max(max_keys_, requests_[static_cast<size_t>(r)].keys);
    }
    T_ = cu_.back();
    Rng rng(spec.seed * 0xbf58476d1ce4e5b9ull + 29);
    DrawValues(rng);
    BuildPages(rng);
    BuildQ();
    BuildOptions(rng);
    out_.assign(static_cast<size_t>(T_ * spec_.q_heads * spec_.v_head_dim + 8) *
                    Bytes(spec_.out),
                0);
    lse_.assign(static_cast<size_t>(spec_.q_heads * T_ + 2 * kLseGuard), NAN);
  }

  const std::vector<Request> &requests() const { return requests_; }
  // flashcpu_plan_describe's text for the last Run's plan.
  const std::string &plan_description() const { return plan_description_; }

  // Poisons out and lse, plans on ctx and runs; the plan is destroyed.
  flashcpu_status Run(flashcpu_context *ctx, std::string *error) {
    PoisonOutputs();
    inputs_before_ = InputBytes();
    flashcpu_plan *plan = nullptr;
    flashcpu_status status = flashcpu_plan_create(
        ctx, &batch_, spec_.q_heads, spec_.q, spec_.out, &kv_, &plan);
    if (status != FLASHCPU_OK) {
      *error = std::string("plan_create: ") + flashcpu_last_error(ctx);
      return status;
    }
    std::vector<char> text(flashcpu_plan_describe(plan, nullptr, 0) + 1);
    flashcpu_plan_describe(plan, text.data(), text.size());
    plan_description_ = text.data();
    const flashcpu_tensor q = QView(), out = OutView();
    status = flashcpu_attention_paged(ctx, plan, &q, &kv_, &out,
                                      lse_.data() + kLseGuard, &params_);
    if (status != FLASHCPU_OK)
      *error = std::string("attention_paged: ") + flashcpu_last_error(ctx);
    ran_kernels_ =
        status == FLASHCPU_OK ? flashcpu_context_last_kernels(ctx) : "";
    flashcpu_plan_destroy(plan);
    return status;
  }

  // What the call wrote (out and lse, guards included).
  std::vector<unsigned char> Written() const {
    std::vector<unsigned char> bytes(out_);
    const unsigned char *lse =
        reinterpret_cast<const unsigned char *>(lse_.data());
    bytes.insert(bytes.end(), lse, lse + lse_.size() * sizeof(float));
    return bytes;
  }

  // Every row of every request against the oracle on a contiguous copy of
  // that request; inputs and guards unchanged.
  testing::AssertionResult CheckAgainstOracle() const {
    if (InputBytes() != inputs_before_)
      return testing::AssertionFailure() << "an input changed; " << Describe();
    for (int64_t g = 0; g < kLseGuard; g++)
      if (!std::isnan(lse_[static_cast<size_t>(g)]) ||
          !std::isnan(
              lse_[static_cast<size_t>(kLseGuard + spec_.q_heads * T_ + g)]))
        return testing::AssertionFailure()
               << "a write landed outside lse; " << Describe();
    const size_t out_elements =
        static_cast<size_t>(T_ * spec_.q_heads * spec_.v_head_dim);
    for (size_t e = out_elements; e < out_elements + 8; e++)
      if (!std::isnan(LoadAs(&out_[e * Bytes(spec_.out)], spec_.out)))
        return testing::AssertionFailure()
               << "a write landed past out; " << Describe();

    ToleranceRule out_rule("out", spec_.out), lse_rule("lse", F32);
    constexpr size_t kFormulations =
        sizeof kNaiveFormulations / sizeof kNaiveFormulations[0];
    // A kernel that rounds P to bf16 is judged against naive code that does.
    const bool weights_bf16 = KernelsRoundWeights(ran_kernels_);
    const NaiveFormulation *formulations = NaiveFormulationsFor(weights_bf16);
    double largest_value = 0.0; // |v| over the requests so far
    const int64_t Hq = spec_.q_heads, Dv = spec_.v_head_dim;
    for (int64_t r = 0; r < R_; r++) {
      const Request &request = requests_[static_cast<size_t>(r)];
      if (request.rows == 0) continue;
      const int64_t L = request.rows, first = cu_[static_cast<size_t>(r)];
      // The request as a batch of its own, its q rows and its K/V read out
      // of the pages, widened to f32 (exactly: the stored values are what
      // the oracle and the naive code compute on, and f32 views spare them
      // a conversion per read), with options for it alone.
      std::vector<float> q_rows, k_rows, v_rows;
      const flashcpu_tensor q = RequestQ(r, &q_rows);
      const flashcpu_tensor k = RequestKv(r, 0, &k_rows),
                            v = RequestKv(r, 1, &v_rows);
      if (weights_bf16) {
        for (const float value : v_rows)
          if (std::isfinite(value) && std::fabs(value) > largest_value)
            largest_value = std::fabs(value);
        out_rule.AllowBf16Weights(largest_value);
      }
      flashcpu_attention_params params = params_;
      flashcpu_tree_mask tree{};
      flashcpu_additive_mask mask{};
      if (request.tree_keys > 0) {
        tree = {tree_bits_.data() + first * tree_row_stride_, L,
                request.tree_keys, tree_row_stride_, 0};
        params.tree_mask = &tree;
      }
      if (params_.additive_mask) {
        mask = additive_;
        mask.data = additive_.data + r * additive_.strides[0] +
                    first * additive_.strides[2];
        params.additive_mask = &mask;
      }
      if (params_.alibi_slopes) {
        params.alibi_slopes =
            params_.alibi_slopes + r * params_.alibi_batch_stride;
        params.alibi_batch_stride = 0;
      }
      std::vector<double> oracle(static_cast<size_t>(L * Dv)),
          oracle_lse(static_cast<size_t>(L));
      std::vector<float> naive[kFormulations], naive_lse[kFormulations];
      for (int64_t h = 0; h < Hq; h++) {
        if (flashcpu_oracle_head(&q, &k, &v, &params, 0, h, oracle.data(),
                                 oracle_lse.data()) != 0)
          return testing::AssertionFailure() << "the oracle ran out of memory";
        for (size_t f = 0; f < kFormulations; f++) {
          naive[f].resize(static_cast<size_t>(L * Dv));
          naive_lse[f].resize(static_cast<size_t>(L));
          NaiveAttentionHeadF32(q, k, v, params, 0, h, formulations[f],
                                naive[f].data(), naive_lse[f].data());
        }
        for (int64_t i = 0; i < L; i++) {
          const int64_t row = first + i;
          for (int64_t d = 0; d < Dv; d++) {
            const size_t e = static_cast<size_t>(i * Dv + d);
            out_rule.Add(OutAt(row, h, d), oracle[e],
                         {FarthestNaive(oracle[e],
                                        [&](size_t f) {
                                          return RoundToDtype(naive[f][e],
                                                              spec_.out);
                                        })},
                         {r, h, i, d});
          }
          const size_t e = static_cast<size_t>(i);
          lse_rule.Add(LseAt(h, row), oracle_lse[e],
                       {FarthestNaive(
                           oracle_lse[e],
                           [&](size_t f) { return double{naive_lse[f][e]}; })},
                       {r, h, i, -1});
        }
      }
    }
    testing::AssertionResult out_verdict = out_rule.Verdict();
    if (!out_verdict)
      return out_verdict << " (b is the request); " << Describe();
    testing::AssertionResult lse_verdict = lse_rule.Verdict();
    if (!lse_verdict)
      return lse_verdict << " (b is the request); " << Describe();
    return testing::AssertionSuccess();
  }

  // Of the naive formulations' values for one element, the finite one
  // farthest from the oracle's: what the rule's err_base takes the largest
  // of (so every formulation counts, however many there are).
  template <typename Value>
  static double FarthestNaive(double oracle, const Value &value_of) {
    constexpr size_t kFormulations =
        sizeof kNaiveFormulations / sizeof kNaiveFormulations[0];
    double farthest = NAN, distance = -1.0;
    for (size_t f = 0; f < kFormulations; f++) {
      const double value = value_of(f);
      if (std::isfinite(value) && std::fabs(value - oracle) > distance) {
        farthest = value;
        distance = std::fabs(value - oracle);
      }
    }
    return farthest;
  }

  std::string Describe() const {
    std::ostringstream text;
    text << spec_.name << ": T=" << T_ << " requests (rows/keys/tree):";
    for (const Request &r : requests_)
      text << " " << r.rows << "/" << r.keys << "/" << r.tree_keys;
    return text.str();
  }

private:
  // ---- values: drawn as doubles, stored rounded to their dtypes.
  void DrawValues(Rng &rng) {
    const int64_t Hq = spec_.q_heads, Hkv = spec_.kv_heads, D = spec_.head_dim,
                  Dv = spec_.v_head_dim;
    q_values_.resize(static_cast<size_t>(T_ * Hq * D));
    for (double &x : q_values_) x = rng.NonZeroUnit();
    k_values_.resize(static_cast<size_t>(R_));
    v_values_.resize(static_cast<size_t>(R_));
    for (int64_t r = 0; r < R_; r++) {
      const int64_t S = requests_[static_cast<size_t>(r)].keys;
      k_values_[static_cast<size_t>(r)].resize(
          static_cast<size_t>(S * Hkv * D));
      v_values_[static_cast<size_t>(r)].resize(
          static_cast<size_t>(S * Hkv * Dv));
      for (double &x : k_values_[static_cast<size_t>(r)]) x = rng.NonZeroUnit();
      for (double &x : v_values_[static_cast<size_t>(r)]) x = rng.NonZeroUnit();
    }
    if (!spec_.large) return;
    // Scale q and k so that the largest |score| is about 300 (as
    // AttentionCase does): past a careless exp, and hard on f16 sums.
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const int64_t group = Hq / Hkv;
    double largest = 0.0;
    for (int64_t r = 0; r < R_; r++)
      for (int64_t i = 0; i < requests_[static_cast<size_t>(r)].rows; i++)
        for (int64_t h = 0; h < Hq; h++)
          for (int64_t j = 0; j < requests_[static_cast<size_t>(r)].keys; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; d++)
              dot +=
                  q_values_[static_cast<size_t>(
                      ((cu_[static_cast<size_t>(r)] + i) * Hq + h) * D + d)] *
                  k_values_[static_cast<size_t>(r)]
                           [static_cast<size_t>((j * Hkv + h / group) * D + d)];
            largest = std::max(largest, std::fabs(dot * scale));
          }
    if (largest == 0.0) return;
    const double factor = std::sqrt(300.0 / largest);
    for (double &x : q_values_) x *= factor;
    for (auto &keys : k_values_)
      for (double &x : keys) x *= factor;
    for (auto &values : v_values_)
      for (double &x : values) x *= 16.0;
  }

  // ---- pages: each request's pages drawn from a shuffled pool with
  // spares; every element not holding a key is NaN.
  void BuildPages(Rng &rng) {
    const int64_t ps = spec_.page_size, Hkv = spec_.kv_heads,
                  D = spec_.head_dim, Dv = spec_.v_head_dim;
    std::vector<int64_t> pages_of(static_cast<size_t>(R_));
    int64_t used = 0, widest = 0;
    for (int64_t r = 0; r < R_; r++) {
      pages_of[static_cast<size_t>(r)] =
          (requests_[static_cast<size_t>(r)].keys + ps - 1) / ps;
      used += pages_of[static_cast<size_t>(r)];
      widest = std::max(widest, pages_of[static_cast<size_t>(r)]);
    }
    const int64_t pool = used + 3;
    std::vector<int32_t> order(static_cast<size_t>(pool));
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; i--)
      std::swap(order[i - 1],
                order[static_cast<size_t>(rng.Below(static_cast<int64_t>(i)))]);

    // Table entries a request does not use hold values no request may read.
    constexpr int32_t kUnused = -99;
    size_t next = 0;
    if (spec_.block_offsets) {
      // Requests' ranges in the flat table, one unused entry after each.
      offsets_.push_back(0);
      for (int64_t r = 0; r < R_; r++) {
        for (int64_t p = 0; p < pages_of[static_cast<size_t>(r)]; p++)
          table_.push_back(order[next++]);
        table_.push_back(kUnused);
        offsets_.push_back(static_cast<int32_t>(table_.size()));
      }
    } else {
      table_stride_ = widest + 1;
      table_.assign(static_cast<size_t>(R_ * table_stride_), kUnused);
      for (int64_t r = 0; r < R_; r++)
        for (int64_t p = 0; p < pages_of[static_cast<size_t>(r)]; p++)
          table_[static_cast<size_t>(r * table_stride_ + p)] = order[next++];
    }

    const flashcpu_dtype dtype = spec_.kv;
    if (spec_.layout == PageLayout::kHnd) {
      kv_ = flashcpu_paged_kv_hnd(nullptr, nullptr, dtype, pool, ps, Hkv, D);
      kv_.v_strides[0] = Hkv * ps * Dv;
      kv_.v_strides[1] = Dv;
      kv_.v_strides[2] = ps * Dv;
    } else {
      kv_ = flashcpu_paged_kv_nhd(nullptr, nullptr, dtype, pool, ps, Hkv, D);
      kv_.v_strides[0] = ps * Hkv * Dv;
      kv_.v_strides[1] = Hkv * Dv;
      kv_.v_strides[2] = Dv;
    }
    kv_.v_head_dim = Dv;
    const size_t size = Bytes(dtype);
    if (spec_.layout == PageLayout::kOneBuffer) {
      const int64_t block = ps * Hkv * D; // D == Dv
      kv_.k_strides[0] = kv_.v_strides[0] = 2 * block;
      k_pages_.resize(static_cast<size_t>(pool * 2 * block) * size);
      FillNan(k_pages_, dtype);
      kv_.k = k_pages_.data();
      kv_.v = k_pages_.data() + static_cast<size_t>(block) * size;
    } else {
      k_pages_.resize(static_cast<size_t>(pool * ps * Hkv * D) * size);
      v_pages_.resize(static_cast<size_t>(pool * ps * Hkv * Dv) * size);
      FillNan(k_pages_, dtype);
      FillNan(v_pages_, dtype);
      kv_.k = k_pages_.data();
      kv_.v = v_pages_.data();
    }
    for (int64_t r = 0; r < R_; r++)
      for (int64_t j = 0; j < requests_[static_cast<size_t>(r)].keys; j++)
        for (int64_t h = 0; h < Hkv; h++) {
          for (int64_t d = 0; d < D; d++)
            StoreAs(PageElement(0, r, j, h, d), dtype,
                    k_values_[static_cast<size_t>(r)]
                             [static_cast<size_t>((j * Hkv + h) * D + d)]);
          for (int64_t d = 0; d < Dv; d++)
            StoreAs(PageElement(1, r, j, h, d), dtype,
                    v_values_[static_cast<size_t>(r)]
                             [static_cast<size_t>((j * Hkv + h) * Dv + d)]);
        }

    flashcpu_batch_init(&batch_);
    batch_.num_requests = R_;
    batch_.cu_seqlens_q = cu_.data();
    batch_.seq_lens_kv = seq_lens_.data();
    batch_.block_table = table_.data();
    batch_.block_table_stride = table_stride_;
    batch_.block_offsets = spec_.block_offsets ? offsets_.data() : nullptr;
  }

  static void FillNan(std::vector<unsigned char> &bytes, flashcpu_dtype dtype) {
    const size_t size = Bytes(dtype);
    for (size_t at = 0; at + size <= bytes.size(); at += size)
      StoreAs(&bytes[at], dtype, NAN);
  }

  int32_t PageOf(int64_t r, int64_t j) const {
    const int64_t start = spec_.block_offsets ? offsets_[static_cast<size_t>(r)]
                                              : r * table_stride_;
    return table_[static_cast<size_t>(start + j / spec_.page_size)];
  }
  unsigned char *PageElement(int side, int64_t r, int64_t j, int64_t h,
                             int64_t d) {
    return const_cast<unsigned char *>(
        static_cast<const PagedStep *>(this)->PageElement(side, r, j, h, d));
  }
  const unsigned char *PageElement(int side, int64_t r, int64_t j, int64_t h,
                                   int64_t d) const {
    const int64_t *s = side ? kv_.v_strides : kv_.k_strides;
    const unsigned char *base =
        static_cast<const unsigned char *>(side ? kv_.v : kv_.k);
    const int64_t at =
        PageOf(r, j) * s[0] + (j % spec_.page_size) * s[1] + h * s[2] + d;
    return base + at * static_cast<int64_t>(Bytes(spec_.kv));
  }

  // K (side 0) or V of request r read back from its pages as f32
  // [1, S, Hkv, dim]; a request of no keys gets a 1-element buffer.
  flashcpu_tensor RequestKv(int64_t r, int side,
                            std::vector<float> *rows) const {
    const int64_t S = requests_[static_cast<size_t>(r)].keys,
                  Hkv = spec_.kv_heads;
    const int64_t dim = side ? spec_.v_head_dim : spec_.head_dim;
    const int64_t size = static_cast<int64_t>(Bytes(spec_.kv));
    rows->assign(static_cast<size_t>(std::max<int64_t>(S * Hkv * dim, 1)),
                 0.0f);
    for (int64_t j = 0; j < S; j++)
      for (int64_t h = 0; h < Hkv; h++) {
        const unsigned char *element = PageElement(side, r, j, h, 0);
        for (int64_t d = 0; d < dim; d++)
          (*rows)[static_cast<size_t>((j * Hkv + h) * dim + d)] =
              static_cast<float>(LoadAs(element + d * size, spec_.kv));
      }
    return flashcpu_tensor_bshd(rows->data(), F32, 1, S, Hkv, dim);
  }

  // Request r's q rows, read back from packed q as f32 [1, L, Hq, D].
  flashcpu_tensor RequestQ(int64_t r, std::vector<float> *rows) const {
    const int64_t L = requests_[static_cast<size_t>(r)].rows,
                  Hq = spec_.q_heads, D = spec_.head_dim;
    const flashcpu_tensor packed = QView();
    const int64_t size = static_cast<int64_t>(Bytes(spec_.q));
    rows->assign(static_cast<size_t>(L * Hq * D), 0.0f);
    for (int64_t i = 0; i < L; i++)
      for (int64_t h = 0; h < Hq; h++)
        for (int64_t d = 0; d < D; d++) {
          const int64_t at =
              (cu_[static_cast<size_t>(r)] + i) * packed.strides[1] +
              h * packed.strides[2] + d;
          (*rows)[static_cast<size_t>((i * Hq + h) * D + d)] =
              static_cast<float>(LoadAs(q_bytes_.data() + at * size, spec_.q));
        }
    return flashcpu_tensor_bshd(rows->data(), F32, 1, L, Hq, D);
  }

  // ---- q: packed rows, optionally padded apart (padding NaN).
  void BuildQ() {
    const int64_t Hq = spec_.q_heads, D = spec_.head_dim;
    q_row_stride_ = Hq * D + (spec_.strided_q ? 24 : 0);
    q_bytes_.resize(
        static_cast<size_t>(std::max<int64_t>(T_, 1) * q_row_stride_) *
        Bytes(spec_.q));
    FillNan(q_bytes_, spec_.q);
    for (int64_t t = 0; t < T_; t++)
      for (int64_t e = 0; e < Hq * D; e++)
        StoreAs(&q_bytes_[static_cast<size_t>(t * q_row_stride_ + e) *
                          Bytes(spec_.q)],
                spec_.q, q_values_[static_cast<size_t>(t * Hq * D + e)]);
  }
  flashcpu_tensor QView() const {
    flashcpu_tensor q =
        flashcpu_tensor_bshd(const_cast<unsigned char *>(q_bytes_.data()),
                             spec_.q, 1, T_, spec_.q_heads, spec_.head_dim);
    q.strides[0] = T_ * q_row_stride_;
    q.strides[1] = q_row_stride_;
    return q;
  }
  flashcpu_tensor OutView() const {
    flashcpu_tensor out =
        flashcpu_tensor_bshd(const_cast<unsigned char *>(out_.data()),
                             spec_.out, 1, T_, spec_.q_heads, spec_.v_head_dim);
    if (spec_.head_major_out) {
      out.strides[1] = spec_.v_head_dim;
      out.strides[2] = T_ * spec_.v_head_dim;
    }
    return out;
  }
  double OutAt(int64_t row, int64_t h, int64_t d) const {
    const flashcpu_tensor out = OutView();
    const int64_t e = row * out.strides[1] + h * out.strides[2] + d;
    return LoadAs(&out_[static_cast<size_t>(e) * Bytes(spec_.out)], spec_.out);
  }
  float LseAt(int64_t h, int64_t row) const {
    return lse_[static_cast<size_t>(kLseGuard + h * T_ + row)];
  }

  void PoisonOutputs() {
    FillNan(out_, spec_.out);
    std::fill(lse_.begin(), lse_.end(), NAN);
  }

  // ---- options.
  void BuildOptions(Rng &rng) {
    const int64_t Hq = spec_.q_heads;
    flashcpu_attention_params_init(&params_);
    params_.flags = spec_.causal ? FLASHCPU_FLAG_CAUSAL : 0u;
    params_.window_left = spec_.window_left;
    params_.window_right = spec_.window_right;
    params_.softcap = spec_.softcap;

    // Tree bits of every packed row, padding words and bits past a
    // request's tree keys random too (they must be ignored).
    int64_t words = 0;
    bool any_tree = false;
    for (const Request &r : requests_) {
      words = std::max(words, (r.tree_keys + 63) / 64);
      any_tree = any_tree || r.tree_keys > 0;
    }
    if (any_tree) {
      tree_row_stride_ = words + 1;
      tree_bits_.resize(
          static_cast<size_t>(std::max<int64_t>(T_, 1) * tree_row_stride_));
      for (uint64_t &word : tree_bits_)
        for (int bit = 0; bit < 64; bit++)
          if (rng.Chance(0.7)) word |= uint64_t{1} << bit;
      for (const Request &r : requests_)
        tree_keys_.push_back(static_cast<int32_t>(r.tree_keys));
      int64_t most = 0;
      for (const Request &r : requests_) most = std::max(most, r.tree_keys);
      // In a vector: its element stays put when the step is moved.
      tree_mask_.assign(1, {tree_bits_.data(), T_, most, tree_row_stride_, 0});
      batch_.tree_mask = tree_mask_.data();
      batch_.tree_num_keys = tree_keys_.data();
    }

    if (spec_.mask != MaskLayout::kNone) {
      const int64_t keys = max_keys_ + 1; // a padding key per row
      const bool packed = spec_.mask == MaskLayout::kPackedRows;
      additive_.strides[0] = packed ? 0 : keys;
      additive_.strides[1] = packed ? T_ * keys : 0;
      additive_.strides[2] = packed ? keys : 0;
      additive_.strides[3] = 1;
      const int64_t extent =
          spec_.mask == MaskLayout::kPackedRows ? Hq * T_ * keys : R_ * keys;
      additive_values_.assign(static_cast<size_t>(std::max<int64_t>(extent, 1)),
                              NAN);
      // Entries of keys past a request's length stay NaN: never read.
      for (int64_t r = 0; r < R_; r++)
        for (int64_t h = 0; h < Hq; h++)
          for (int64_t i = 0; i < requests_[static_cast<size_t>(r)].rows; i++)
            for (int64_t j = 0; j < requests_[static_cast<size_t>(r)].keys;
                 j++) {
              float &value = additive_values_[static_cast<size_t>(
                  r * additive_.strides[0] + h * additive_.strides[1] +
                  (cu_[static_cast<size_t>(r)] + i) * additive_.strides[2] +
                  j)];
              if (std::isnan(value)) // broadcast entries are drawn once
                value = rng.Chance(0.1)
                            ? -INFINITY
                            : static_cast<float>(rng.Uniform(-2.0, 2.0));
            }
      additive_.data = additive_values_.data();
      params_.additive_mask = &additive_;
    }

    if (spec_.sinks) {
      sinks_.resize(static_cast<size_t>(Hq) * Bytes(spec_.sinks_dtype));
      // Near the lse of a row of small scores over tens of keys, so that
      // the sink takes a real share.
      for (int64_t h = 0; h < Hq; h++)
        StoreAs(&sinks_[static_cast<size_t>(h) * Bytes(spec_.sinks_dtype)],
                spec_.sinks_dtype, rng.Uniform(0.0, 4.0));
      params_.sinks = sinks_.data();
      params_.sinks_dtype = spec_.sinks_dtype;
    }

    if (spec_.alibi != Alibi::kNone) {
      const bool per_request = spec_.alibi == Alibi::kPerRequest;
      const int64_t stride = per_request ? Hq + 2 : 0; // padding NaN
      slopes_.assign(static_cast<size_t>(per_request ? R_ * stride : Hq), NAN);
      for (int64_t r = 0; r < (per_request ? R_ : 1); r++)
        for (int64_t h = 0; h < Hq; h++)
          slopes_[static_cast<size_t>(r * stride + h)] =
              static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) /
                                           static_cast<double>(Hq)) *
                                 rng.Uniform(0.5, 1.5));
      params_.alibi_slopes = slopes_.data();
      params_.alibi_batch_stride = stride;
    }
  }

  std::vector<unsigned char> InputBytes() const {
    std::vector<unsigned char> bytes(q_bytes_);
    auto append = [&bytes](const void *data, size_t size) {
      const unsigned char *p = static_cast<const unsigned char *>(data);
      bytes.insert(bytes.end(), p, p + size);
    };
    append(k_pages_.data(), k_pages_.size());
    append(v_pages_.data(), v_pages_.size());
    append(tree_bits_.data(), tree_bits_.size() * sizeof(uint64_t));
    append(additive_values_.data(), additive_values_.size() * sizeof(float));
    append(sinks_.data(), sinks_.size());
    append(slopes_.data(), slopes_.size() * sizeof(float));
    append(table_.data(), table_.size() * sizeof(int32_t));
    return bytes;
  }

  StepSpec spec_;
  std::vector<Request> requests_;
  int64_t R_ = 0, T_ = 0, max_keys_ = 0;
  std::vector<int32_t> cu_, seq_lens_, table_, offsets_, tree_keys_;
  std::vector<flashcpu_tree_mask> tree_mask_;
  int64_t table_stride_ = 0, tree_row_stride_ = 0, q_row_stride_ = 0;
  std::vector<double> q_values_;
  std::vector<std::vector<double>> k_values_, v_values_; // [R][S * Hkv * dim]
  std::vector<unsigned char> k_pages_, v_pages_, q_bytes_, out_, sinks_;
  std::vector<uint64_t> tree_bits_;
  std::vector<float> additive_values_, slopes_, lse_;
  flashcpu_additive_mask additive_{};
  flashcpu_paged_kv kv_{};
  flashcpu_batch batch_{};
  flashcpu_attention_params params_{};
  std::vector<unsigned char> inputs_before_;
  std::string plan_description_;
  std::string ran_kernels_; // what the last Run ran
};

// gtest prints a parameter's bytes otherwise (found by ADL: in fctest,
// StepSpec's namespace).
inline void PrintTo(const KernelParam<StepSpec> &param, std::ostream *os) {
  *os << param.kernel->name << " " << param.test_case.name;
}

} // namespace fctest

#endif // FLASHCPU_TESTS_KERNELS_PAGED_STEP_H
