#include "ggml_case.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "attention_case.h"
#include "fixtures.h"
#include "naive_attention.h"
#include "oracle.h"
#include "tolerance.h"

namespace fctest {
namespace {

// A byte buffer 8-byte aligned, as ggml's buffers are (more, in fact).
struct Buffer {
  std::vector<uint64_t> words;
  void Resize(size_t bytes, unsigned char fill) {
    words.assign((bytes + 7) / 8, 0);
    std::memset(words.data(), fill, words.size() * 8);
  }
  unsigned char *data() {
    return reinterpret_cast<unsigned char *>(words.data());
  }
};

size_t RowBytes(int32_t type, int64_t d) {
  switch (type) {
  case FCG_TYPE_F32:
    return static_cast<size_t>(d) * 4;
  case FCG_TYPE_Q8_0:
    return static_cast<size_t>(d / 32) * 34;
  default:
    return static_cast<size_t>(d) * 2;
  }
}

size_t ElementBytesOf(int32_t type) {
  return type == FCG_TYPE_Q8_0 ? 34 : RowBytes(type, 1);
}

// Writes a random row of `type` at `where` and its exact values to `exact`.
void FillRow(int32_t type, int64_t d, unsigned char *where, float *exact,
             Rng &rng) {
  if (type == FCG_TYPE_Q8_0) {
    for (int64_t block = 0; block < d / 32; block++) {
      unsigned char *bytes = where + block * 34;
      const double scale =
          RoundToFormat(rng.Uniform(0.004, 0.012), kHalfFormat);
      const uint16_t scale_bits = EncodeHalf(scale);
      std::memcpy(bytes, &scale_bits, 2);
      for (int e = 0; e < 32; e++) {
        const int code = static_cast<int>(rng.Below(255)) - 127;
        bytes[2 + e] = static_cast<unsigned char>(static_cast<int8_t>(code));
        exact[block * 32 + e] = static_cast<float>(scale * code);
      }
    }
    return;
  }
  const flashcpu_dtype dtype = type == FCG_TYPE_F32   ? FLASHCPU_DTYPE_F32
                               : type == FCG_TYPE_F16 ? FLASHCPU_DTYPE_F16
                                                      : FLASHCPU_DTYPE_BF16;
  const size_t size = ElementBytesOf(type);
  for (int64_t e = 0; e < d; e++) {
    StoreAs(where + e * size, dtype, rng.Uniform(-1.0, 1.0));
    exact[e] = static_cast<float>(LoadAs(where + e * size, dtype));
  }
}

// A K or V cache of `capacity` rows per batch of which the view covers
// `keys`; every byte outside the written rows is 0xff (NaN in every type).
void BuildCache(const GgmlCase &c, int32_t type, int64_t d, Buffer &buffer,
                fcg_tensor &t, std::vector<float> &exact, Rng &rng) {
  const int64_t capacity = c.keys + c.spare_rows, heads = c.kv_heads;
  const size_t row = RowBytes(type, d);
  buffer.Resize(static_cast<size_t>(c.batch * capacity * heads) * row, 0xff);
  t.data = buffer.data();
  t.type = type;
  const int64_t ne[4] = {d, c.keys, heads, c.batch};
  std::memcpy(t.ne, ne, sizeof ne);
  t.nb[0] = ElementBytesOf(type);
  t.nb[1] = c.token_major ? heads * row : row;
  t.nb[2] = c.token_major ? row : capacity * row;
  t.nb[3] = static_cast<size_t>(capacity * heads) * row;
  exact.assign(static_cast<size_t>(c.batch * c.keys * heads * d), 0.0f);
  for (int64_t b = 0; b < c.batch; b++)
    for (int64_t s = 0; s < c.keys; s++)
      for (int64_t h = 0; h < heads; h++)
        FillRow(type, d,
                buffer.data() + b * t.nb[3] + s * t.nb[1] + h * t.nb[2],
                &exact[static_cast<size_t>(((b * c.keys + s) * heads + h) * d)],
                rng);
}

constexpr uint16_t kHalfHidden = 0xfc00, kHalfNan = 0x7e00;

void FillMaskPlane(const GgmlCase &c, uint16_t *plane, int64_t row_stride,
                   Rng &rng) {
  for (int64_t i = 0; i < c.rows; i++) {
    uint16_t *row = plane + i * row_stride;
    for (int64_t j = 0; j < c.keys; j++) {
      bool seen = true;
      if (c.fill == MaskFill::kCausal) seen = j < c.keys - c.rows + 1 + i;
      if (c.fill == MaskFill::kPrefix) seen = j < c.visible;
      row[j] = seen ? 0 : kHalfHidden;
      if (c.fill == MaskFill::kRandom)
        row[j] = rng.Chance(0.05) ? 0x8000 /* -0 */
                                  : EncodeHalf(rng.Uniform(-1.0, 1.0));
    }
    if (c.fill != MaskFill::kRandom) continue;
    if (rng.Chance(0.3)) { // a run of hidden keys
      const int64_t begin = rng.Below(c.keys), length = 1 + rng.Below(c.keys);
      for (int64_t j = begin; j < c.keys && j < begin + length; j++)
        row[j] = kHalfHidden;
    }
    if (rng.Chance(0.08))
      for (int64_t j = 0; j < c.keys; j++) row[j] = kHalfHidden;
  }
}

} // namespace

std::string GgmlCase::Describe() const {
  std::ostringstream s;
  s << "D " << head_dim << "/" << v_head_dim << " L " << rows << " S " << keys
    << " heads " << q_heads << "/" << kv_heads << " B " << batch << " K/V type "
    << k_type << "/" << v_type << (token_major ? " token-major" : " head-major")
    << " mask " << (mask ? static_cast<int>(fill) : -1) << " planes "
    << mask_heads << "x" << mask_batches << " sinks " << sinks << " max_bias "
    << max_bias << " softcap " << softcap << " seed " << seed;
  return s.str();
}

testing::AssertionResult RunGgmlCase(const GgmlCase &c, GgmlRun *run) {
  Rng rng(c.seed * 7919 + 17);
  const int64_t B = c.batch, L = c.rows, S = c.keys, Hq = c.q_heads;
  const int64_t D = c.head_dim, Dv = c.v_head_dim;
  Buffer q_buffer, k_buffer, v_buffer, mask_buffer, out_buffer;
  std::vector<float> q_exact, k_exact, v_exact;

  fcg_flash_attn op{};
  q_buffer.Resize(static_cast<size_t>(B * L * Hq * D) * 4, 0xff);
  op.q = {q_buffer.data(), FCG_TYPE_F32, {D, L, Hq, B}, {4, 0, 0, 0}};
  op.q.nb[1] = static_cast<size_t>(c.token_major ? Hq * D : D) * 4;
  op.q.nb[2] = static_cast<size_t>(c.token_major ? D : L * D) * 4;
  op.q.nb[3] = static_cast<size_t>(L * Hq * D) * 4;
  q_exact.resize(static_cast<size_t>(B * L * Hq * D));
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < L; i++)
      for (int64_t h = 0; h < Hq; h++)
        FillRow(FCG_TYPE_F32, D,
                q_buffer.data() + b * op.q.nb[3] + i * op.q.nb[1] +
                    h * op.q.nb[2],
                &q_exact[static_cast<size_t>(((b * L + i) * Hq + h) * D)], rng);
  BuildCache(c, c.k_type, D, k_buffer, op.k, k_exact, rng);
  BuildCache(c, c.v_type, Dv, v_buffer, op.v, v_exact, rng);
  const std::vector<uint64_t> k_before = k_buffer.words,
                              v_before = v_buffer.words;

  fcg_tensor mask{};
  const int64_t mask_rows = L + c.mask_spare_rows,
                mask_keys = S + c.mask_spare_keys;
  if (c.mask) {
    const size_t plane = static_cast<size_t>(mask_rows * mask_keys);
    mask_buffer.Resize(plane * c.mask_heads * c.mask_batches * 2, 0);
    uint16_t *values = reinterpret_cast<uint16_t *>(mask_buffer.data());
    for (size_t e = 0; e < plane * c.mask_heads * c.mask_batches; e++)
      values[e] = kHalfNan; // outside the rows and keys ggml reads
    for (int64_t p = 0; p < c.mask_heads * c.mask_batches; p++)
      FillMaskPlane(c, values + p * plane, mask_keys, rng);
    mask = {values,
            FCG_TYPE_F16,
            {mask_keys, mask_rows, c.mask_heads, c.mask_batches},
            {2, static_cast<size_t>(mask_keys) * 2, plane * 2,
             plane * c.mask_heads * 2}};
    op.mask = &mask;
  }
  std::vector<float> sinks(static_cast<size_t>(Hq));
  for (float &s : sinks) s = static_cast<float>(rng.Uniform(-2.0, 3.0));
  fcg_tensor sinks_tensor = {sinks.data(),
                             FCG_TYPE_F32,
                             {Hq, 1, 1, 1},
                             {4, static_cast<size_t>(Hq) * 4,
                              static_cast<size_t>(Hq) * 4,
                              static_cast<size_t>(Hq) * 4}};
  if (c.sinks) op.sinks = &sinks_tensor;
  out_buffer.Resize(static_cast<size_t>(B * L * Hq * Dv) * 4, 0xff);
  op.out = {out_buffer.data(),
            FCG_TYPE_F32,
            {Dv, Hq, L, B},
            {4, static_cast<size_t>(Dv) * 4, static_cast<size_t>(Hq * Dv) * 4,
             static_cast<size_t>(L * Hq * Dv) * 4}};
  op.scale =
      c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(static_cast<float>(D));
  op.max_bias = c.max_bias;
  op.logit_softcap = c.softcap;
  op.precision = FCG_PREC_F32;

  char why[256];
  if (!fcg_supports(&op, why, sizeof why))
    return testing::AssertionFailure()
           << "declined: " << why << "; " << c.Describe();
  GgmlRun local;
  GgmlRun &r = run ? *run : local;
  std::vector<int64_t> lengths(static_cast<size_t>(B), -1);
  fcg_plan_op(&op, c.copy_budget, lengths.data(), &r.plan);
  std::vector<float> copy(r.plan.copy_floats + 1);
  flashcpu_context *ctx = SharedContext();
  for (int64_t h0 = 0; h0 < Hq; h0 += r.plan.heads_per_call, r.calls++) {
    fcg_call call;
    fcg_map(&op, &r.plan, lengths.data(), h0, copy.data(), &call);
    const flashcpu_status status = flashcpu_attention(
        ctx, &call.q, &call.k, &call.v, &call.out, nullptr, &call.params);
    if (status != FLASHCPU_OK)
      return testing::AssertionFailure()
             << flashcpu_last_error(ctx) << "; " << c.Describe();
  }
  if (k_buffer.words != k_before || v_buffer.words != v_before)
    return testing::AssertionFailure() << "K or V changed; " << c.Describe();

  // The expected result, from the test's own exact copies.
  std::vector<float> expected_mask;
  flashcpu_additive_mask additive{};
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  params.scale = op.scale;
  params.softcap = std::fabs(c.softcap);
  if (c.sinks) {
    params.sinks = sinks.data();
    params.sinks_dtype = FLASHCPU_DTYPE_F32;
  }
  if (c.mask) {
    const uint16_t *values = static_cast<const uint16_t *>(mask.data);
    expected_mask.resize(static_cast<size_t>(B * Hq * L * S));
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < Hq; h++) {
        const float slope =
            c.max_bias > 0.0f ? fcg_alibi_slope(Hq, c.max_bias, h) : 1.0f;
        const int64_t plane =
            (b % c.mask_batches) * c.mask_heads + h % c.mask_heads;
        for (int64_t i = 0; i < L; i++)
          for (int64_t j = 0; j < S; j++)
            expected_mask[static_cast<size_t>(((b * Hq + h) * L + i) * S + j)] =
                slope * static_cast<float>(DecodeHalf(
                            values[(plane * mask_rows + i) * mask_keys + j]));
      }
    additive.data = expected_mask.data();
    additive.strides[0] = Hq * L * S;
    additive.strides[1] = L * S;
    additive.strides[2] = S;
    additive.strides[3] = 1;
    params.additive_mask = &additive;
  }
  const flashcpu_tensor q = flashcpu_tensor_bshd(
                            q_exact.data(), FLASHCPU_DTYPE_F32, B, L, Hq, D),
                        k = flashcpu_tensor_bshd(k_exact.data(),
                                                 FLASHCPU_DTYPE_F32, B, S,
                                                 c.kv_heads, D),
                        v = flashcpu_tensor_bshd(v_exact.data(),
                                                 FLASHCPU_DTYPE_F32, B, S,
                                                 c.kv_heads, Dv);
  ToleranceRule rule("out", FLASHCPU_DTYPE_F32);
  std::vector<double> oracle(static_cast<size_t>(L * Dv)),
      oracle_lse(static_cast<size_t>(L));
  constexpr size_t kCount =
      sizeof kNaiveFormulations / sizeof kNaiveFormulations[0];
  std::vector<float> naive[kCount], naive_lse[kCount];
  const float *out = reinterpret_cast<const float *>(out_buffer.data());
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++) {
      if (flashcpu_oracle_head(&q, &k, &v, &params, b, h, oracle.data(),
                               oracle_lse.data()) != 0)
        return testing::AssertionFailure() << "the oracle ran out of memory";
      for (size_t f = 0; f < kCount; f++) {
        naive[f].resize(oracle.size());
        naive_lse[f].resize(oracle_lse.size());
        NaiveAttentionHeadF32(q, k, v, params, b, h, kNaiveFormulations[f],
                              naive[f].data(), naive_lse[f].data());
      }
      for (int64_t i = 0; i < L; i++)
        for (int64_t d = 0; d < Dv; d++) {
          const size_t e = static_cast<size_t>(i * Dv + d);
          rule.Add(out[((b * L + i) * Hq + h) * Dv + d], oracle[e],
                   {naive[0][e], naive[1][e], naive[2][e], naive[3][e]},
                   {b, h, i, d});
        }
    }
  testing::AssertionResult verdict = rule.Verdict();
  if (!verdict) verdict << "; " << c.Describe();
  return verdict;
}

} // namespace fctest
