#include "naive_attention.h"

#include <cmath>
#include <vector>

#include "fixtures.h"

namespace fctest {
namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;

float LoadFloat(const flashcpu_tensor &t, int64_t b, int64_t s, int64_t h,
                int64_t d) {
  int64_t index =
      b * t.strides[0] + s * t.strides[1] + h * t.strides[2] + d * t.strides[3];
  const char *base = static_cast<const char *>(t.data);
  return static_cast<float>(LoadAs(
      base + index * static_cast<int64_t>(ElementBytes(t.dtype)), t.dtype));
}

// Whether causal and window allow the key: key <= position for causal,
// and position - left <= key <= position + right (as differences, which
// cannot overflow for windows up to INT64_MAX).
bool KeyAllowed(const flashcpu_attention_params &params, int64_t position,
                int64_t key) {
  const int64_t ahead = key - position; // > 0: a future key
  if ((params.flags & FLASHCPU_FLAG_CAUSAL) && ahead > 0) return false;
  if (params.window_right >= 0 && ahead > params.window_right) return false;
  if (params.window_left >= 0 && -ahead > params.window_left) return false;
  return true;
}

bool TreeAllows(const flashcpu_tree_mask *tree, int64_t b, int64_t i,
                int64_t key, int64_t kv_length) {
  if (!tree) return true;
  int64_t offset = key - (kv_length - tree->num_keys);
  if (offset < 0) return true; // older than the tree: not its business
  const uint64_t *row =
      tree->bits + b * tree->batch_stride + i * tree->row_stride;
  return (row[offset / 64] >> (offset % 64)) & 1u;
}

// The dot product in `lanes` interleaved partial sums, added up in order.
float Dot(const float *a, const float *b, int64_t n, int lanes) {
  float partial[32] = {0}; // lanes <= 32
  int64_t d = 0;
  for (; d + lanes <= n; d += lanes)
    for (int lane = 0; lane < lanes; lane++)
      partial[lane] += a[d + lane] * b[d + lane];
  for (int lane = 0; d < n; d++, lane++) partial[lane] += a[d] * b[d];
  float sum = 0.0f;
  for (int lane = 0; lane < lanes; lane++) sum += partial[lane];
  return sum;
}

} // namespace

// The SIMD kernels sum dot products in 4 to 32 lanes of pre-scaled q; at
// large scores the rounding of the score dominates, and its size depends
// on that order, so err_base samples each of those orders.
const NaiveFormulation kNaiveFormulations[7] = {
    {false, 1},  {true, 1},  {true, 4}, {true, 8},
    {false, 16}, {true, 16}, {true, 32}};
const NaiveFormulation kNaiveFormulationsBf16Weights[7] = {
    {false, 1, true},  {true, 1, true},  {true, 4, true}, {true, 8, true},
    {false, 16, true}, {true, 16, true}, {true, 32, true}};

void NaiveAttentionHeadF32(const flashcpu_tensor &q, const flashcpu_tensor &k,
                           const flashcpu_tensor &v,
                           const flashcpu_attention_params &params, int64_t b,
                           int64_t h, const NaiveFormulation &formulation,
                           float *out, float *lse) {
  const int64_t q_len = q.dims[1], head_dim = q.dims[3], v_head_dim = v.dims[3];
  const int64_t kv_head = h / (q.dims[2] / k.dims[2]);
  const int64_t kv_length =
      params.kv_lengths ? params.kv_lengths[b] : k.dims[1];
  const float scale =
      params.scale != 0.0f
          ? params.scale
          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const bool log2_domain = formulation.log2_domain;
  const bool plain_scores = params.softcap == 0.0f &&
                            params.additive_mask == nullptr &&
                            params.alibi_slopes == nullptr;
  // What q is multiplied by before the dot product, and the score after it.
  const float q_factor = !log2_domain   ? 1.0f
                         : plain_scores ? scale * kLog2e
                                        : scale;
  const float score_factor = !log2_domain ? scale : 1.0f;

  std::vector<float> keys(static_cast<size_t>(kv_length * head_dim));
  std::vector<float> values(static_cast<size_t>(kv_length * v_head_dim));
  for (int64_t j = 0; j < kv_length; j++) {
    for (int64_t d = 0; d < head_dim; d++)
      keys[static_cast<size_t>(j * head_dim + d)] =
          LoadFloat(k, b, j, kv_head, d);
    for (int64_t d = 0; d < v_head_dim; d++)
      values[static_cast<size_t>(j * v_head_dim + d)] =
          LoadFloat(v, b, j, kv_head, d);
  }
  // The sink is one more score (already in the domain of the others) whose
  // value row is zero.
  const bool has_sink = params.sinks != nullptr;
  float sink = 0.0f;
  if (has_sink) {
    const char *sinks = static_cast<const char *>(params.sinks);
    sink = static_cast<float>(LoadAs(
        sinks + h * static_cast<int64_t>(ElementBytes(params.sinks_dtype)),
        params.sinks_dtype));
    if (log2_domain) sink *= kLog2e;
  }
  const float slope =
      params.alibi_slopes
          ? params.alibi_slopes[b * params.alibi_batch_stride + h]
          : 0.0f;

  std::vector<float> q_row(static_cast<size_t>(head_dim));
  std::vector<float> scores(static_cast<size_t>(kv_length));

  for (int64_t i = 0; i < q_len; i++) {
    float *out_row = out + i * v_head_dim;
    for (int64_t d = 0; d < head_dim; d++)
      q_row[static_cast<size_t>(d)] = LoadFloat(q, b, i, h, d) * q_factor;
    const int64_t position = i + kv_length - q_len;
    for (int64_t j = 0; j < kv_length; j++) {
      float &score = scores[static_cast<size_t>(j)];
      score = -INFINITY;
      if (!KeyAllowed(params, position, j) ||
          !TreeAllows(params.tree_mask, b, i, j, kv_length))
        continue;
      score = Dot(q_row.data(), keys.data() + j * head_dim, head_dim,
                  formulation.dot_lanes) *
              score_factor;
      if (params.softcap > 0.0f)
        score = params.softcap * std::tanh(score / params.softcap);
      if (slope != 0.0f) {
        const int64_t distance = position > j ? position - j : j - position;
        score -= slope * static_cast<float>(distance);
      }
      if (const flashcpu_additive_mask *mask = params.additive_mask) {
        float added = mask->data[b * mask->strides[0] + h * mask->strides[1] +
                                 i * mask->strides[2] + j * mask->strides[3]];
        score = added == -INFINITY ? -INFINITY : score + added;
      }
      if (log2_domain && !plain_scores) score *= kLog2e;
    }

    float max_score = -INFINITY;
    bool saw_nan = has_sink && std::isnan(sink);
    for (float score : scores) {
      if (std::isnan(score))
        saw_nan = true;
      else if (score > max_score)
        max_score = score;
    }
    for (int64_t d = 0; d < v_head_dim; d++) out_row[d] = saw_nan ? NAN : 0.0f;
    if (saw_nan || max_score == -INFINITY) { // no key: the sink alone, if any
      const float empty =
          has_sink ? (log2_domain ? sink * kLn2 : sink) : -INFINITY;
      lse[i] = saw_nan ? NAN : empty;
      continue;
    }
    if (has_sink) max_score = std::fmax(max_score, sink);
    float sum = 0.0f;
    if (has_sink)
      sum = log2_domain ? std::exp2(sink - max_score)
                        : std::exp(sink - max_score);
    for (int64_t j = 0; j < kv_length; j++) {
      float score = scores[static_cast<size_t>(j)];
      if (score == -INFINITY) continue;
      float weight = log2_domain ? std::exp2(score - max_score)
                                 : std::exp(score - max_score);
      sum += weight;
      const float product_weight =
          formulation.weights_bf16
              ? static_cast<float>(RoundToDtype(weight, FLASHCPU_DTYPE_BF16))
              : weight;
      for (int64_t d = 0; d < v_head_dim; d++)
        out_row[d] +=
            product_weight * values[static_cast<size_t>(j * v_head_dim + d)];
    }
    for (int64_t d = 0; d < v_head_dim; d++) out_row[d] /= sum;
    lse[i] = log2_domain ? (max_score + std::log2(sum)) * kLn2
                         : max_score + std::log(sum);
  }
}

} // namespace fctest
