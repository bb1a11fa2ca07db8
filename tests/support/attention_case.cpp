#include "attention_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "attention_case_internal.h"
#include "naive_attention.h"
#include "oracle.h"
#include "tolerance.h"

namespace fctest {
using namespace attention_case_detail;
namespace {

constexpr double kLargeScore =
    300.0; // the largest |score| in Magnitude::kLarge

struct SharedContextHolder {
  flashcpu_context *ctx = nullptr;
  SharedContextHolder() { flashcpu_context_create(nullptr, &ctx); }
  ~SharedContextHolder() { flashcpu_context_destroy(ctx); }
};

} // namespace

flashcpu_context *SharedContext() {
  static SharedContextHolder holder;
  return holder.ctx;
}

flashcpu_context *ContextWith(const flashcpu_context_options &options) {
  flashcpu_context *ctx = nullptr;
  EXPECT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK)
      << flashcpu_last_error(nullptr);
  return ctx;
}

const char *AdditivePatternName(AdditivePattern pattern) {
  switch (pattern) {
  case AdditivePattern::kFull:
    return "full";
  case AdditivePattern::kBroadcastBatch:
    return "broadcast_batch";
  case AdditivePattern::kBroadcastHeads:
    return "broadcast_heads";
  case AdditivePattern::kKeyPadding:
    return "key_padding";
  case AdditivePattern::kKeyMajor:
    return "key_major";
  }
  return "?";
}

AttentionCase::AttentionCase() { flashcpu_attention_params_init(&params_); }

AttentionCase &AttentionCase::batch(int64_t n) {
  batch_ = n;
  return *this;
}
AttentionCase &AttentionCase::q_len(int64_t n) {
  q_len_ = n;
  return *this;
}
AttentionCase &AttentionCase::kv_len(int64_t n) {
  kv_len_ = n;
  return *this;
}
AttentionCase &AttentionCase::heads(int64_t q_heads, int64_t kv_heads) {
  q_heads_ = q_heads;
  kv_heads_ = kv_heads;
  return *this;
}
AttentionCase &AttentionCase::head_dim(int64_t d) {
  head_dim_ = d;
  return *this;
}
AttentionCase &AttentionCase::v_head_dim(int64_t d) {
  v_head_dim_ = d;
  return *this;
}
AttentionCase &AttentionCase::dtypes(flashcpu_dtype q, flashcpu_dtype kv,
                                     flashcpu_dtype out) {
  return dtypes(q, kv, kv, out);
}
AttentionCase &AttentionCase::dtypes(flashcpu_dtype q, flashcpu_dtype k,
                                     flashcpu_dtype v, flashcpu_dtype out) {
  q_dtype_ = q;
  k_dtype_ = k;
  v_dtype_ = v;
  out_dtype_ = out;
  return *this;
}
AttentionCase &AttentionCase::layout(Layout layout) {
  layout_ = layout;
  return *this;
}
AttentionCase &AttentionCase::causal(bool on) {
  causal_ = on;
  return *this;
}
AttentionCase &AttentionCase::window(int64_t left, int64_t right) {
  window_left_ = left;
  window_right_ = right;
  return *this;
}
AttentionCase &AttentionCase::softcap(float cap) {
  softcap_ = cap;
  return *this;
}
AttentionCase &AttentionCase::scale(float scale) {
  scale_ = scale;
  return *this;
}
AttentionCase &AttentionCase::tree(int64_t num_keys, double density,
                                   bool broadcast) {
  tree_keys_ = num_keys;
  tree_density_ = density;
  tree_broadcast_ = broadcast;
  return *this;
}
AttentionCase &AttentionCase::additive(AdditivePattern pattern,
                                       double hidden_fraction) {
  additive_on_ = true;
  additive_pattern_ = pattern;
  additive_hidden_fraction_ = hidden_fraction;
  return *this;
}
AttentionCase &AttentionCase::kv_lengths(std::vector<int64_t> lengths) {
  kv_lengths_ = std::move(lengths);
  return *this;
}
AttentionCase &AttentionCase::sinks(flashcpu_dtype dtype) {
  sinks_on_ = true;
  sinks_dtype_ = dtype;
  return *this;
}
AttentionCase &AttentionCase::alibi(bool per_batch) {
  alibi_on_ = true;
  alibi_per_batch_ = per_batch;
  return *this;
}
AttentionCase &AttentionCase::magnitude(Magnitude magnitude) {
  magnitude_ = magnitude;
  return *this;
}
AttentionCase &AttentionCase::seed(uint64_t seed) {
  seed_ = seed;
  return *this;
}
AttentionCase &AttentionCase::with_lse(bool on) {
  with_lse_ = on;
  return *this;
}
AttentionCase &AttentionCase::values_alias_keys(bool on) {
  values_alias_keys_ = on;
  return *this;
}
AttentionCase &AttentionCase::queries_share_one_row(bool on) {
  queries_share_one_row_ = on;
  return *this;
}

flashcpu_tensor AttentionCase::QView() const {
  flashcpu_tensor view = q_.View();
  if (queries_share_one_row_) view.strides[FLASHCPU_DIM_SEQ] = 0;
  return view;
}

flashcpu_tensor AttentionCase::VView() const {
  return values_alias_keys_ ? k_.View() : v_.View();
}

int64_t AttentionCase::kv_length_of(int64_t b) const {
  return kv_lengths_.empty() ? kv_len_ : kv_lengths_[static_cast<size_t>(b)];
}

AttentionCase &AttentionCase::Build() {
  if (v_head_dim_ < 0) v_head_dim_ = head_dim_;
  if (values_alias_keys_) { // one view serves as both
    v_dtype_ = k_dtype_;
    v_head_dim_ = head_dim_;
  }
  // KV caches are allocated for more rows than they hold; so are q and out
  // in that layout, whose extra rows must stay untouched.
  const bool cache = layout_ == Layout::kCache;
  q_ = TestTensor(q_dtype_, {batch_, q_len_, q_heads_, head_dim_}, layout_,
                  q_len_ + (cache ? 5 : 0));
  k_ = TestTensor(k_dtype_, {batch_, kv_len_, kv_heads_, head_dim_}, layout_,
                  kv_len_ + (cache ? 13 : 0));
  v_ = TestTensor(v_dtype_, {batch_, kv_len_, kv_heads_, v_head_dim_}, layout_,
                  kv_len_ + (cache ? 13 : 0));
  out_ = TestTensor(out_dtype_, {batch_, q_len_, q_heads_, v_head_dim_},
                    layout_, q_len_ + (cache ? 5 : 0));
  lse_storage_.assign(
      static_cast<size_t>(batch_ * q_heads_ * q_len_ + 2 * kLseGuard), NAN);

  flashcpu_attention_params_init(&params_);
  params_.scale = scale_;
  params_.flags = causal_ ? FLASHCPU_FLAG_CAUSAL : 0u;
  params_.window_left = window_left_;
  params_.window_right = window_right_;
  params_.softcap = softcap_;
  params_.kv_lengths = kv_lengths_.empty() ? nullptr : kv_lengths_.data();
  DrawInputs();
  BuildTree();
  BuildAdditive();
  BuildAlibi();
  BuildSinks(); // last: drawn around the lse the options above give
  built_ = true;
  return *this;
}

// FCTEST_SEED_OFFSET=n draws other inputs for every case, to explore beyond
// the fixed seeds; unset, the suite is deterministic.
uint64_t SeedOffset() {
  const char *text = std::getenv("FCTEST_SEED_OFFSET");
  return text ? std::strtoull(text, nullptr, 10) : 0;
}

void AttentionCase::DrawInputs() {
  Rng rng((seed_ + SeedOffset()) * 0x2545f4914f6cdd1dull + 17);
  for (int64_t b = 0; b < batch_; b++) {
    for (int64_t i = 0; i < q_len_; i++)
      for (int64_t h = 0; h < q_heads_; h++)
        for (int64_t d = 0; d < head_dim_; d++)
          q_.Set(b, i, h, d, rng.NonZeroUnit());
    // Rows past the batch's kv length stay NaN (set by the constructor).
    for (int64_t j = 0; j < kv_length_of(b); j++)
      for (int64_t h = 0; h < kv_heads_; h++) {
        for (int64_t d = 0; d < head_dim_; d++)
          k_.Set(b, j, h, d, rng.NonZeroUnit());
        for (int64_t d = 0; d < v_head_dim_; d++)
          v_.Set(b, j, h, d, rng.NonZeroUnit());
      }
  }
  if (magnitude_ != Magnitude::kLarge) return;

  // Scale q and k so that the largest |score| is about kLargeScore: large
  // enough to overflow a careless exp, and to make f16 sums misbehave.
  const double scale =
      scale_ != 0.0f ? scale_ : 1.0 / std::sqrt(static_cast<double>(head_dim_));
  const int64_t group = q_heads_ / kv_heads_;
  double largest = 0.0;
  std::vector<double> key_rows;
  for (int64_t b = 0; b < batch_; b++)
    for (int64_t h = 0; h < q_heads_; h++) {
      const int64_t keys = kv_length_of(b);
      key_rows.assign(static_cast<size_t>(keys * head_dim_), 0.0);
      for (int64_t j = 0; j < keys; j++)
        for (int64_t d = 0; d < head_dim_; d++)
          key_rows[static_cast<size_t>(j * head_dim_ + d)] =
              k_.Get(b, j, h / group, d);
      for (int64_t i = 0; i < q_len_; i++)
        for (int64_t j = 0; j < keys; j++) {
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim_; d++)
            dot += q_.Get(b, i, h, d) *
                   key_rows[static_cast<size_t>(j * head_dim_ + d)];
          largest = std::max(largest, std::fabs(dot * scale));
        }
    }
  if (largest == 0.0) return;
  const double factor = std::sqrt(kLargeScore / largest);
  for (int64_t b = 0; b < batch_; b++) {
    for (int64_t i = 0; i < q_len_; i++)
      for (int64_t h = 0; h < q_heads_; h++)
        for (int64_t d = 0; d < head_dim_; d++)
          q_.Set(b, i, h, d, q_.Get(b, i, h, d) * factor);
    for (int64_t j = 0; j < kv_length_of(b); j++)
      for (int64_t h = 0; h < kv_heads_; h++) {
        for (int64_t d = 0; d < head_dim_; d++)
          k_.Set(b, j, h, d, k_.Get(b, j, h, d) * factor);
        for (int64_t d = 0; d < v_head_dim_; d++)
          v_.Set(b, j, h, d, v_.Get(b, j, h, d) * 16.0);
      }
  }
}

void AttentionCase::BuildTree() {
  params_.tree_mask = nullptr;
  if (tree_keys_ <= 0) return;
  int64_t shortest = kv_len_;
  for (int64_t b = 0; b < batch_; b++)
    shortest = std::min(shortest, kv_length_of(b));
  const int64_t num_keys = std::min(tree_keys_, shortest);
  if (num_keys < 1) return; // a tree mask needs a key in every batch
  const int64_t words = (num_keys + 63) / 64;
  tree_.num_rows = q_len_ + 2; // more rows than needed is allowed
  tree_.num_keys = num_keys;
  tree_.row_stride = words + 1; // and a padding word per row
  tree_.batch_stride = tree_broadcast_ ? 0 : tree_.num_rows * tree_.row_stride;
  const int64_t batches = tree_broadcast_ ? 1 : batch_;
  // Every bit is random, including padding words and bits past num_keys,
  // which the library must ignore.
  Rng rng((seed_ + SeedOffset()) * 0x9e3779b97f4a7c15ull + 3);
  tree_bits_.assign(
      static_cast<size_t>(batches * tree_.num_rows * tree_.row_stride), 0);
  for (uint64_t &word : tree_bits_)
    for (int bit = 0; bit < 64; bit++)
      if (rng.Chance(tree_density_)) word |= uint64_t{1} << bit;
  tree_.bits = tree_bits_.data();
  params_.tree_mask = &tree_;
}

void AttentionCase::BuildAdditive() {
  params_.additive_mask = nullptr;
  if (!additive_on_) return;
  const int64_t keys = std::max<int64_t>(kv_len_, 1);
  const int64_t padded_keys = keys + 2;
  int64_t *strides = additive_.strides;
  switch (additive_pattern_) {
  case AdditivePattern::kFull:
    strides[0] = q_heads_ * q_len_ * padded_keys;
    strides[1] = q_len_ * padded_keys;
    strides[2] = padded_keys;
    strides[3] = 1;
    break;
  case AdditivePattern::kBroadcastBatch:
    strides[0] = 0;
    strides[1] = q_len_ * padded_keys;
    strides[2] = padded_keys;
    strides[3] = 1;
    break;
  case AdditivePattern::kBroadcastHeads:
    strides[0] = q_len_ * padded_keys;
    strides[1] = 0;
    strides[2] = padded_keys;
    strides[3] = 1;
    break;
  case AdditivePattern::kKeyPadding:
    strides[0] = padded_keys;
    strides[1] = 0;
    strides[2] = 0;
    strides[3] = 1;
    break;
  case AdditivePattern::kKeyMajor:
    strides[0] = q_heads_ * q_len_ * keys;
    strides[1] = q_len_ * keys;
    strides[2] = 1;
    strides[3] = q_len_;
    break;
  }
  const int64_t last = (batch_ - 1) * strides[0] + (q_heads_ - 1) * strides[1] +
                       (q_len_ - 1) * strides[2] + (keys - 1) * strides[3];
  // Entries no batch may read (padding, keys past a kv length) stay NaN.
  additive_values_.assign(static_cast<size_t>(last + 1), NAN);
  Rng rng((seed_ + SeedOffset()) * 0xd1b54a32d192ed03ull + 5);
  for (int64_t b = 0; b < batch_; b++)
    for (int64_t h = 0; h < q_heads_; h++)
      for (int64_t i = 0; i < q_len_; i++)
        for (int64_t j = 0; j < kv_length_of(b); j++)
          additive_at(b, h, i, j) =
              rng.Chance(additive_hidden_fraction_)
                  ? -INFINITY
                  : static_cast<float>(rng.Uniform(-2.0, 2.0));
  additive_.data = additive_values_.data();
  params_.additive_mask = &additive_;
}

void AttentionCase::BuildAlibi() {
  params_.alibi_slopes = nullptr;
  params_.alibi_batch_stride = 0;
  if (!alibi_on_) return;
  // Per batch, rows of Hq slopes and 3 NaN floats of padding.
  const int64_t stride = alibi_per_batch_ ? q_heads_ + 3 : 0;
  const int64_t rows = alibi_per_batch_ ? batch_ : 1;
  alibi_slopes_.assign(
      static_cast<size_t>(alibi_per_batch_ ? rows * stride : q_heads_), NAN);
  params_.alibi_batch_stride = stride; // what alibi_slope_at indexes by
  Rng rng((seed_ + SeedOffset()) * 0xbf58476d1ce4e5b9ull + 7);
  for (int64_t b = 0; b < rows; b++)
    for (int64_t h = 0; h < q_heads_; h++)
      alibi_slope_at(b, h) =
          static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) /
                                       static_cast<double>(q_heads_)) *
                             rng.Uniform(0.5, 1.5));
  params_.alibi_slopes = alibi_slopes_.data();
}

void AttentionCase::BuildSinks() {
  params_.sinks = nullptr;
  if (!sinks_on_) return;
  // The lse of a row without sinks (the middle row, else the last or the
  // first of a batch where it sees a key): the sink is drawn around it.
  std::vector<double> typical(static_cast<size_t>(q_heads_), 0.0);
  for (int64_t h = 0; h < q_heads_; h++) {
    bool found = false;
    for (int64_t b = 0; b < batch_ && !found; b++)
      for (int64_t i : {q_len_ / 2, q_len_ - 1, int64_t{0}}) {
        double lse = -INFINITY;
        if (i >= 0 && i < q_len_) OracleRow(b, h, i, &lse);
        if (std::isfinite(lse)) {
          typical[static_cast<size_t>(h)] = lse;
          found = true;
          break;
        }
      }
  }
  sinks_storage_.assign(
      static_cast<size_t>(q_heads_) * ElementBytes(sinks_dtype_), 0);
  Rng rng((seed_ + SeedOffset()) * 0x94d049bb133111ebull + 11);
  for (int64_t h = 0; h < q_heads_; h++)
    set_sink(h, typical[static_cast<size_t>(h)] + rng.Uniform(-1.5, 1.5));
  params_.sinks = sinks_storage_.data();
  params_.sinks_dtype = sinks_dtype_;
}

void AttentionCase::set_sink(int64_t h, double logit) {
  StoreAs(sinks_storage_.data() +
              static_cast<size_t>(h) * ElementBytes(sinks_dtype_),
          sinks_dtype_, logit);
}

float &AttentionCase::alibi_slope_at(int64_t b, int64_t h) {
  return alibi_slopes_[static_cast<size_t>(b * params_.alibi_batch_stride + h)];
}

float &AttentionCase::additive_at(int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t *s = additive_.strides;
  return additive_values_[static_cast<size_t>(b * s[0] + h * s[1] + i * s[2] +
                                              j * s[3])];
}

void AttentionCase::set_tree_bit(int64_t b, int64_t i, int64_t key_offset,
                                 bool on) {
  uint64_t &word = tree_bits_[static_cast<size_t>(
      b * tree_.batch_stride + i * tree_.row_stride + key_offset / 64)];
  const uint64_t bit = uint64_t{1} << (key_offset % 64);
  word = on ? (word | bit) : (word & ~bit);
}

float AttentionCase::lse_at(int64_t b, int64_t h, int64_t i) const {
  return lse_storage_[static_cast<size_t>(kLseGuard +
                                          (b * q_heads_ + h) * q_len_ + i)];
}

std::vector<unsigned char> AttentionCase::out_bytes() const {
  const flashcpu_tensor view = out_.View();
  const size_t bytes = static_cast<size_t>(view.dims[0] * view.dims[1] *
                                           view.dims[2] * view.dims[3]) *
                       flashcpu_dtype_size(view.dtype);
  const auto *first = static_cast<const unsigned char *>(view.data);
  return std::vector<unsigned char>(first, first + bytes);
}

flashcpu_status AttentionCase::Run(flashcpu_context *ctx) {
  if (!built_) Build();
  out_.Poison();
  std::fill(lse_storage_.begin(), lse_storage_.end(), NAN);
  q_before_ = q_.bytes();
  k_before_ = k_.bytes();
  v_before_ = v_.bytes();
  out_before_ = out_.bytes();
  tree_before_ = tree_bits_;
  additive_before_ = additive_values_;
  kv_lengths_before_ = kv_lengths_;
  sinks_before_ = sinks_storage_;
  alibi_before_ = alibi_slopes_;
  const flashcpu_tensor q = QView(), k = k_.View(), v = VView(),
                        out = out_.View();
  const flashcpu_status status = flashcpu_attention(
      ctx, &q, &k, &v, &out,
      with_lse_ ? lse_storage_.data() + kLseGuard : nullptr, &params_);
  ran_kernels_ =
      status == FLASHCPU_OK ? flashcpu_context_last_kernels(ctx) : "";
  return status;
}

std::vector<double> AttentionCase::OracleRow(int64_t b, int64_t h, int64_t i,
                                             double *lse) const {
  const flashcpu_tensor q = QView(), k = k_.View(), v = VView();
  std::vector<double> row(static_cast<size_t>(v_head_dim_));
  double row_lse;
  flashcpu_oracle_row(&q, &k, &v, &params_, b, h, i, row.data(), &row_lse);
  if (lse) *lse = row_lse;
  return row;
}

testing::AssertionResult AttentionCase::CheckAgainstOracle() const {
  if (q_.bytes() != q_before_ || k_.bytes() != k_before_ ||
      v_.bytes() != v_before_ || tree_bits_ != tree_before_ ||
      kv_lengths_ != kv_lengths_before_ ||
      !SameFloats(additive_values_, additive_before_) ||
      sinks_storage_ != sinks_before_ ||
      !SameFloats(alibi_slopes_, alibi_before_))
    return testing::AssertionFailure()
           << "an input buffer changed; " << Describe();
  const std::string outside =
      CompareOutsideView(out_before_, out_.bytes(), out_.ViewBytes());
  if (!outside.empty())
    return testing::AssertionFailure()
           << "out: " << outside << "; " << Describe();
  const size_t lse_count = static_cast<size_t>(batch_ * q_heads_ * q_len_);
  for (size_t g = 0; g < static_cast<size_t>(kLseGuard); g++)
    if (!SameBits(lse_storage_[g], NAN) ||
        !SameBits(lse_storage_[kLseGuard + lse_count + g], NAN))
      return testing::AssertionFailure()
             << "a write landed outside lse; " << Describe();

  const flashcpu_tensor q = QView(), k = k_.View(), v = VView();
  ToleranceRule out_rule("out", out_dtype_),
      lse_rule("lse", FLASHCPU_DTYPE_F32);
  // A kernel that rounds P to bf16 is judged against naive code that does.
  const bool weights_bf16 = KernelsRoundWeights(ran_kernels_);
  const NaiveFormulation *formulations = NaiveFormulationsFor(weights_bf16);
  if (weights_bf16) {
    const TestTensor &values = values_alias_keys_ ? k_ : v_;
    double largest = 0.0;
    for (int64_t b = 0; b < batch_; b++)
      for (int64_t j = 0; j < kv_length_of(b); j++)
        for (int64_t hk = 0; hk < kv_heads_; hk++)
          for (int64_t d = 0; d < v_head_dim_; d++) {
            const double value = std::fabs(values.Get(b, j, hk, d));
            if (std::isfinite(value) && value > largest) largest = value;
          }
    out_rule.AllowBf16Weights(largest);
  }
  const size_t row_count = static_cast<size_t>(q_len_),
               dv = static_cast<size_t>(v_head_dim_);
  std::vector<double> oracle(row_count * dv), oracle_lse(row_count);
  constexpr size_t kCount =
      sizeof kNaiveFormulations / sizeof kNaiveFormulations[0];
  std::vector<float> naive[kCount], naive_lse[kCount];
  for (size_t f = 0; f < kCount; f++) {
    naive[f].resize(row_count * dv);
    naive_lse[f].resize(row_count);
  }
  for (int64_t b = 0; b < batch_; b++)
    for (int64_t h = 0; h < q_heads_; h++) {
      if (flashcpu_oracle_head(&q, &k, &v, &params_, b, h, oracle.data(),
                               oracle_lse.data()) != 0)
        return testing::AssertionFailure() << "the oracle ran out of memory";
      for (size_t f = 0; f < kCount; f++)
        NaiveAttentionHeadF32(q, k, v, params_, b, h, formulations[f],
                              naive[f].data(), naive_lse[f].data());
      for (int64_t i = 0; i < q_len_; i++) {
        const size_t row = static_cast<size_t>(i);
        for (size_t d = 0; d < dv; d++) {
          const size_t e = row * dv + d;
          out_rule.Add(out_.Get(b, i, h, static_cast<int64_t>(d)), oracle[e],
                       {RoundToDtype(naive[0][e], out_dtype_),
                        RoundToDtype(naive[1][e], out_dtype_),
                        RoundToDtype(naive[2][e], out_dtype_),
                        RoundToDtype(naive[3][e], out_dtype_)},
                       {b, h, i, static_cast<int64_t>(d)});
        }
        if (with_lse_)
          lse_rule.Add(lse_at(b, h, i), oracle_lse[row],
                       {naive_lse[0][row], naive_lse[1][row], naive_lse[2][row],
                        naive_lse[3][row]},
                       {b, h, i, -1});
        else if (!SameBits(lse_at(b, h, i), NAN))
          return testing::AssertionFailure()
                 << "lse was written though none was passed";
      }
    }
  if (std::getenv("FCTEST_STATS"))
    std::printf("STATS out %.3g %.3g ratio %.3f lse %.3g %.3g ratio %.3f\n",
                out_rule.err_base(), out_rule.max_error(),
                out_rule.max_error() / out_rule.err_base(), lse_rule.err_base(),
                lse_rule.max_error(),
                lse_rule.max_error() / lse_rule.err_base());
  testing::AssertionResult out_verdict = out_rule.Verdict();
  if (!out_verdict) return out_verdict << "; " << Describe();
  testing::AssertionResult lse_verdict = lse_rule.Verdict();
  if (!lse_verdict) return lse_verdict << "; " << Describe();
  return testing::AssertionSuccess();
}

void AttentionCase::Test(flashcpu_context *ctx) {
  if (!built_) Build();
  if (!ctx) ctx = SharedContext();
  const flashcpu_status status = Run(ctx);
  ASSERT_EQ(status, FLASHCPU_OK)
      << flashcpu_status_name(status) << ": " << flashcpu_last_error(ctx)
      << "; " << Describe();
  EXPECT_STREQ(flashcpu_last_error(ctx), "");
  EXPECT_TRUE(CheckAgainstOracle());
  EXPECT_TRUE(CheckPagedMatches(ctx));
}

std::string AttentionCase::Describe() const {
  std::ostringstream text;
  text << "B=" << batch_ << " L=" << q_len_ << " S=" << kv_len_
       << " Hq=" << q_heads_ << " Hkv=" << kv_heads_ << " D=" << head_dim_
       << " Dv=" << v_head_dim_
       << " dtypes(q,k,v,out)=" << flashcpu_dtype_name(q_dtype_) << ","
       << flashcpu_dtype_name(k_dtype_) << "," << flashcpu_dtype_name(v_dtype_)
       << "," << flashcpu_dtype_name(out_dtype_)
       << " layout=" << LayoutName(layout_);
  if (causal_) text << " causal";
  if (window_left_ != -1 || window_right_ != -1)
    text << " window=(" << window_left_ << "," << window_right_ << ")";
  if (softcap_ != 0.0f) text << " softcap=" << softcap_;
  if (scale_ != 0.0f) text << " scale=" << scale_;
  if (params_.tree_mask)
    text << " tree(keys=" << tree_.num_keys
         << (tree_broadcast_ ? ",broadcast" : "") << ")";
  if (additive_on_)
    text << " additive(" << AdditivePatternName(additive_pattern_) << ")";
  if (sinks_on_) text << " sinks(" << flashcpu_dtype_name(sinks_dtype_) << ")";
  if (alibi_on_) text << (alibi_per_batch_ ? " alibi(per_batch)" : " alibi");
  if (values_alias_keys_) text << " v=k";
  if (queries_share_one_row_) text << " q_rows_shared";
  if (!kv_lengths_.empty()) {
    text << " kv_lengths=[";
    for (size_t b = 0; b < kv_lengths_.size(); b++)
      text << (b ? "," : "") << kv_lengths_[b];
    text << "]";
  }
  text << (magnitude_ == Magnitude::kLarge ? " large" : " small")
       << " seed=" << seed_;
  return text.str();
}

bool AttentionCase::out_row_has_nan(int64_t b, int64_t i, int64_t h) const {
  const int64_t dv = v_head_dim_ < 0 ? head_dim_ : v_head_dim_;
  for (int64_t d = 0; d < dv; d++)
    if (std::isnan(out_at(b, i, h, d))) return true;
  return false;
}

bool AttentionCase::out_row_finite(int64_t b, int64_t i, int64_t h) const {
  const int64_t dv = v_head_dim_ < 0 ? head_dim_ : v_head_dim_;
  for (int64_t d = 0; d < dv; d++)
    if (!std::isfinite(out_at(b, i, h, d))) return false;
  return std::isfinite(lse_at(b, h, i));
}

AttentionCase::Shape AttentionCase::shape() const {
  const bool aliased = values_alias_keys_;
  return {batch_,
          q_len_,
          kv_len_,
          q_heads_,
          kv_heads_,
          head_dim_,
          aliased ? head_dim_ : (v_head_dim_ < 0 ? head_dim_ : v_head_dim_),
          q_dtype_,
          k_dtype_,
          aliased ? k_dtype_ : v_dtype_,
          out_dtype_,
          causal_,
          softcap_ != 0.0f,
          tree_keys_ > 0,
          additive_on_,
          !kv_lengths_.empty()};
}

} // namespace fctest
