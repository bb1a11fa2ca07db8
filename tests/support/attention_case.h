// A fluent builder for one flashcpu_attention call, checked element by
// element against the float64 oracle with VERIFY.md's tolerance rule
// (in the style of XNNPACK's testers):
//
// Environment: FCTEST_SEED_OFFSET=n draws other random inputs for every case
// (to explore beyond the fixed seeds); FCTEST_STATS=1 prints each case's
// err_base and largest error.
//
//   AttentionCase().batch(2).q_len(65).kv_len(130).heads(8, 2).head_dim(72)
//       .dtypes(F16, F16, F32).causal().window(16, 0).Test();
//
// Inputs are random and never zero; rows the call must not read (kv rows
// past a batch's kv length, padding, cache capacity, additive-mask entries
// past the kv length) hold NaN, so reading them shows. out and lse are
// poisoned with NaN before the call, so an element left unwritten shows;
// bytes of out outside its view, lse's guard words and every input must be
// unchanged afterwards.
//
// Test() also runs the same problem through the paged path
// (flashcpu_attention_paged, K/V scattered into pages the way an engine
// keeps them; see CheckPagedMatches), which must write the very bytes the
// contiguous call wrote.
#ifndef FLASHCPU_TESTS_ATTENTION_CASE_H
#define FLASHCPU_TESTS_ATTENTION_CASE_H

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "flashcpu/flashcpu.h"
#include "test_tensor.h"

namespace fctest {

// Patterns of the additive mask's strides.
enum class AdditivePattern {
  kFull,           // one value per (batch, head, row, key), padded rows
  kBroadcastBatch, // batch stride 0
  kBroadcastHeads, // head stride 0
  kKeyPadding,     // per (batch, key) only: head and row strides 0
  kKeyMajor, // keys outermost inside a (batch, head): strides[3] > strides[2]
};
const char *AdditivePatternName(AdditivePattern pattern);

enum class Magnitude {
  kSmall, // |x| < 1
  kLarge, // q, k scaled so that the largest |score| is about 300
};

// A process-wide context with the default options.
flashcpu_context *SharedContext();
// A new context with these options (expects success; NULL on failure).
flashcpu_context *ContextWith(const flashcpu_context_options &options);

class AttentionCase {
public:
  AttentionCase();
  AttentionCase(const AttentionCase &) = delete;
  AttentionCase &operator=(const AttentionCase &) = delete;

  AttentionCase &batch(int64_t n);
  AttentionCase &q_len(int64_t n);
  AttentionCase &kv_len(int64_t n); // S: rows of the k/v views
  AttentionCase &heads(int64_t q_heads, int64_t kv_heads);
  AttentionCase &head_dim(int64_t d);   // of q and k; v and out too unless...
  AttentionCase &v_head_dim(int64_t d); // ...this sets them apart
  AttentionCase &dtypes(flashcpu_dtype q, flashcpu_dtype kv,
                        flashcpu_dtype out);
  AttentionCase &dtypes(flashcpu_dtype q, flashcpu_dtype k, flashcpu_dtype v,
                        flashcpu_dtype out);
  AttentionCase &layout(Layout layout);
  AttentionCase &causal(bool on = true);
  AttentionCase &window(int64_t left, int64_t right);
  AttentionCase &softcap(float cap);
  AttentionCase &scale(float scale);
  // Tree mask over the newest num_keys keys (clamped to the shortest kv
  // length; dropped when that is 0), each bit set with `density`.
  AttentionCase &tree(int64_t num_keys, double density = 0.7,
                      bool broadcast = false);
  // Additive mask of random values in [-2, 2], a fraction of them -inf.
  AttentionCase &additive(AdditivePattern pattern = AdditivePattern::kFull,
                          double hidden_fraction = 0.1);
  AttentionCase &kv_lengths(std::vector<int64_t> lengths);
  // Attention sinks stored as `dtype`: per query head, a logit drawn within
  // 1.5 of the lse a row of that head has without sinks, so that the sink
  // takes a real share of every row's softmax.
  AttentionCase &sinks(flashcpu_dtype dtype = FLASHCPU_DTYPE_F32);
  // ALiBi with random positive slopes, 2^(-8 (h + 1) / Hq) times a factor in
  // [0.5, 1.5): [Hq], or per batch [B, Hq] with a padded batch stride (the
  // padding NaN).
  AttentionCase &alibi(bool per_batch = false);
  AttentionCase &magnitude(Magnitude magnitude);
  AttentionCase &seed(uint64_t seed);
  AttentionCase &with_lse(bool on);
  // Inputs may overlap each other (only out and lse may not): pass k's view
  // as v too (needs equal dtypes and head_dims), or give q a seq stride of 0
  // so that every query row reads row 0.
  AttentionCase &values_alias_keys(bool on = true);
  AttentionCase &queries_share_one_row(bool on = true);

  // Allocates buffers and draws the inputs. Test() builds when needed; call
  // it first to edit inputs through the accessors below.
  AttentionCase &Build();
  TestTensor &q() { return q_; }
  TestTensor &k() { return k_; }
  TestTensor &v() { return v_; }
  // Additive mask value for (b, h, i, j), by index through its strides.
  float &additive_at(int64_t b, int64_t h, int64_t i, int64_t j);
  // Sets or clears tree bit `key_offset` (0 = oldest tree key) of row i.
  void set_tree_bit(int64_t b, int64_t i, int64_t key_offset, bool on);
  // With sinks(), after Build: stores logit (rounded to the sinks' dtype)
  // as query head h's sink.
  void set_sink(int64_t h, double logit);
  // With alibi(), after Build: the slope of (b, h); without per-batch
  // slopes, b must be 0 and the slope serves every batch.
  float &alibi_slope_at(int64_t b, int64_t h);
  const flashcpu_attention_params &params() const { return params_; }

  // Poisons out and lse, then calls flashcpu_attention.
  flashcpu_status Run(flashcpu_context *ctx);
  // Every element against the oracle, plus the guard checks above.
  testing::AssertionResult CheckAgainstOracle() const;
  // Runs the problem of the last Run again through flashcpu_plan_create and
  // flashcpu_attention_paged on ctx, as an engine would: the K/V rows of
  // each batch scattered over pages in random order (page size and NHD/HND
  // layout picked from the case), one request per batch, tree and additive
  // masks in the packed-row layout, lse [Hq, T]. Every output row and lse
  // must have the contiguous call's bytes, nothing outside out and lse may
  // change. Succeeds with a message starting "skipped" where the paged path
  // cannot run the same problem on the same kernel (aliased inputs; a
  // forced split-KV kernel and too many rows for it).
  testing::AssertionResult CheckPagedMatches(flashcpu_context *ctx);
  // Build if needed, Run on ctx (default: SharedContext()), expect OK,
  // CheckAgainstOracle and CheckPagedMatches.
  void Test(flashcpu_context *ctx = nullptr);

  // Results of the last Run.
  const TestTensor &out() const { return out_; }
  // The bytes of out's elements in order (out is contiguous): to compare
  // two runs byte for byte.
  std::vector<unsigned char> out_bytes() const;
  double out_at(int64_t b, int64_t i, int64_t h, int64_t d) const {
    return out_.Get(b, i, h, d);
  }
  float lse_at(int64_t b, int64_t h, int64_t i) const;
  // Whether some element of output row (b, i, h) is NaN; whether all are
  // finite and so is its lse.
  bool out_row_has_nan(int64_t b, int64_t i, int64_t h) const;
  bool out_row_finite(int64_t b, int64_t i, int64_t h) const;
  // The oracle's row (and lse) for (b, h, i).
  std::vector<double> OracleRow(int64_t b, int64_t h, int64_t i,
                                double *lse = nullptr) const;

  int64_t kv_length_of(int64_t b) const;
  // The shape and options as set so far (valid before Build): what a
  // kernel's takes() predicate looks at.
  struct Shape {
    int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim, v_head_dim;
    flashcpu_dtype q, k, v, out;
    bool causal, softcap, tree, additive, kv_lengths;
  };
  Shape shape() const;
  std::string Describe() const;

  // For tests of the checker itself: corrupt what a call wrote.
  TestTensor &out_for_checker_tests() { return out_; }
  float &lse_storage_for_checker_tests(int64_t index) {
    return lse_storage_[static_cast<size_t>(index)];
  }

private:
  void DrawInputs();
  // The views the call (and the oracle) get.
  flashcpu_tensor QView() const;
  flashcpu_tensor VView() const;
  void BuildTree();
  void BuildAdditive();
  void BuildAlibi();
  void BuildSinks();

  // Shape and options.
  int64_t batch_ = 1, q_len_ = 1, kv_len_ = 1, q_heads_ = 1, kv_heads_ = 1;
  int64_t head_dim_ = 16, v_head_dim_ = -1;
  flashcpu_dtype q_dtype_ = FLASHCPU_DTYPE_F32, k_dtype_ = FLASHCPU_DTYPE_F32,
                 v_dtype_ = FLASHCPU_DTYPE_F32, out_dtype_ = FLASHCPU_DTYPE_F32;
  Layout layout_ = Layout::kBSHD;
  bool causal_ = false;
  int64_t window_left_ = -1, window_right_ = -1;
  float softcap_ = 0.0f, scale_ = 0.0f;
  int64_t tree_keys_ = 0;
  double tree_density_ = 0.7;
  bool tree_broadcast_ = false;
  bool additive_on_ = false;
  AdditivePattern additive_pattern_ = AdditivePattern::kFull;
  double additive_hidden_fraction_ = 0.1;
  std::vector<int64_t> kv_lengths_;
  bool sinks_on_ = false;
  flashcpu_dtype sinks_dtype_ = FLASHCPU_DTYPE_F32;
  bool alibi_on_ = false, alibi_per_batch_ = false;
  Magnitude magnitude_ = Magnitude::kSmall;
  uint64_t seed_ = 1;
  bool with_lse_ = true;
  bool values_alias_keys_ = false, queries_share_one_row_ = false;

  // Buffers and the call's arguments.
  bool built_ = false;
  TestTensor q_, k_, v_, out_;
  std::vector<uint64_t> tree_bits_;
  flashcpu_tree_mask tree_{};
  std::vector<float> additive_values_;
  flashcpu_additive_mask additive_{};
  std::vector<unsigned char> sinks_storage_; // [Hq] in sinks_dtype_
  std::vector<float> alibi_slopes_;
  std::vector<float> lse_storage_; // guard words either side of lse
  flashcpu_attention_params params_{};

  // Snapshots taken by Run.
  std::vector<unsigned char> q_before_, k_before_, v_before_, out_before_;
  std::vector<uint64_t> tree_before_;
  std::vector<float> additive_before_;
  std::vector<int64_t> kv_lengths_before_;
  std::vector<unsigned char> sinks_before_;
  std::vector<float> alibi_before_;
  // What the last Run's call ran (flashcpu_context_last_kernels).
  std::string ran_kernels_;
};

} // namespace fctest

#endif // FLASHCPU_TESTS_ATTENTION_CASE_H
