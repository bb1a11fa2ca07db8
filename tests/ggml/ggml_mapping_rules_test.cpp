// The rules of src/ggml's mapping that need no attention call: what it
// declines and why, ggml's ALiBi slopes, how it classifies masks, and the
// f16 mask conversion.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "ggml/ggml_mapping.h"

namespace fctest {
namespace {

fcg_tensor Contiguous(int32_t type, int64_t ne0, int64_t ne1, int64_t ne2,
                      int64_t ne3) {
  const size_t size = type == FCG_TYPE_F32 ? 4 : type == FCG_TYPE_Q8_0 ? 34 : 2;
  const int64_t block = type == FCG_TYPE_Q8_0 ? 32 : 1;
  fcg_tensor t{nullptr, type, {ne0, ne1, ne2, ne3}, {size, 0, 0, 0}};
  t.nb[1] = static_cast<size_t>(ne0 / block) * size;
  t.nb[2] = t.nb[1] * static_cast<size_t>(ne1);
  t.nb[3] = t.nb[2] * static_cast<size_t>(ne2);
  return t;
}

// A decode-shaped op llama.cpp would build: 32/8 heads of 128.
struct Op {
  fcg_tensor mask = Contiguous(FCG_TYPE_F16, 256, 1, 1, 1);
  fcg_tensor sinks = Contiguous(FCG_TYPE_F32, 32, 1, 1, 1);
  fcg_flash_attn op{};
  Op() {
    op.q = Contiguous(FCG_TYPE_F32, 128, 1, 32, 1);
    op.k = Contiguous(FCG_TYPE_F16, 128, 256, 8, 1);
    op.v = Contiguous(FCG_TYPE_F16, 128, 256, 8, 1);
    op.out = Contiguous(FCG_TYPE_F32, 128, 32, 1, 1);
    op.mask = &mask;
    op.scale = 0.125f;
    op.precision = FCG_PREC_F32;
  }
  std::string Why() {
    char why[256];
    return fcg_supports(&op, why, sizeof why) ? "" : why;
  }
};

TEST(GgmlMappingRules, AcceptsWhatLlamaCppBuilds) {
  for (int32_t type :
       {FCG_TYPE_F32, FCG_TYPE_F16, FCG_TYPE_BF16, FCG_TYPE_Q8_0}) {
    Op o;
    o.op.k = Contiguous(type, 128, 256, 8, 1);
    o.op.v = Contiguous(type, 128, 256, 8, 1);
    o.op.sinks = &o.sinks;
    o.op.max_bias = 8.0f;
    o.op.logit_softcap = 30.0f;
    EXPECT_EQ(o.Why(), "");
  }
}

TEST(GgmlMappingRules, DeclinesWithAReason) {
  struct Rule {
    const char *change, *reason;
    void (*apply)(Op &);
  } const rules[] = {
      {"q f16", "q is f16", [](Op &o) { o.op.q.type = FCG_TYPE_F16; }},
      {"K q4_0", "k is another type (type 2)", [](Op &o) { o.op.k.type = 2; }},
      {"V q5_1", "v is another type", [](Op &o) { o.op.v.type = 7; }},
      {"K rows strided", "k's rows are not contiguous",
       [](Op &o) { o.op.k.nb[0] = 4; }},
      {"q8_0 K of 48", "head size",
       [](Op &o) {
         o.op.q = Contiguous(FCG_TYPE_F32, 48, 1, 32, 1);
         o.op.k = Contiguous(FCG_TYPE_Q8_0, 32, 256, 8, 1);
         o.op.k.ne[0] = 48;
       }},
      {"V heads", "v's keys or heads", [](Op &o) { o.op.v.ne[2] = 4; }},
      {"heads not a multiple", "not a multiple",
       [](Op &o) { o.op.k.ne[2] = o.op.v.ne[2] = 5; }},
      {"batch", "another batch", [](Op &o) { o.op.k.ne[3] = 2; }},
      {"out f16", "the result is f16", [](Op &o) { o.op.out.type = 1; }},
      {"out shape", "[Dv, Hq, L, B]", [](Op &o) { o.op.out.ne[1] = 16; }},
      {"mask f32", "the mask is f32", [](Op &o) { o.mask.type = 0; }},
      {"mask short", "does not cover", [](Op &o) { o.mask.ne[0] = 255; }},
      {"mask planes", "do not repeat", [](Op &o) { o.mask.ne[2] = 3; }},
      {"sinks f16", "sinks are not contiguous f32",
       [](Op &o) {
         o.op.sinks = &o.sinks;
         o.sinks.type = FCG_TYPE_F16;
       }},
      {"too few sinks", "16 sinks for 32 heads",
       [](Op &o) {
         o.op.sinks = &o.sinks;
         o.sinks.ne[0] = 16;
       }},
      {"scale 0", "scale 0", [](Op &o) { o.op.scale = 0.0f; }},
      {"scale inf", "scale inf", [](Op &o) { o.op.scale = INFINITY; }},
      {"softcap NaN", "not finite", [](Op &o) { o.op.logit_softcap = NAN; }},
      {"max_bias without mask", "max_bias without a mask",
       [](Op &o) {
         o.op.mask = nullptr;
         o.op.max_bias = 8.0f;
       }},
      {"precision f16", "precision 1", [](Op &o) { o.op.precision = 1; }},
  };
  for (const Rule &rule : rules) {
    Op o;
    rule.apply(o);
    const std::string why = o.Why();
    EXPECT_NE(why.find(rule.reason), std::string::npos)
        << rule.change << ": \"" << why << "\"";
  }
}

TEST(GgmlMappingRules, AlibiSlopes) {
  // Powers of two: 2^(-max_bias (h + 1) / n), exact.
  for (int64_t h = 0; h < 8; h++)
    EXPECT_EQ(fcg_alibi_slope(8, 8.0f, h), std::ldexp(1.0f, -(int)h - 1));
  // Otherwise the largest power of two n below the head count takes that
  // series and the others 2^(-max_bias (2 (h - n) + 1) / (2 n)).
  for (int64_t heads : {12, 20, 40})
    for (float max_bias : {8.0f, 3.0f}) {
      const int64_t n = heads == 12 ? 8 : heads == 20 ? 16 : 32;
      for (int64_t h = 0; h < heads; h++) {
        const double exponent = h < n
                                    ? -max_bias * (h + 1) / n
                                    : -max_bias * (2 * (h - n) + 1) / (2.0 * n);
        const double expected = std::exp2(exponent);
        EXPECT_NEAR(fcg_alibi_slope(heads, max_bias, h), expected,
                    expected * 4e-6)
            << heads << " heads, head " << h;
      }
    }
  EXPECT_EQ(fcg_alibi_slope(32, 0.0f, 5), 1.0f);
  EXPECT_EQ(fcg_alibi_slope(32, -1.0f, 5), 1.0f);
}

// Plans a decode-like op over a hand-written mask of `rows` x `keys`.
fcg_plan PlanMask(const std::vector<uint16_t> &values, int64_t rows,
                  int64_t keys, std::vector<int64_t> *lengths) {
  fcg_tensor mask = Contiguous(FCG_TYPE_F16, keys, rows, 1, 1);
  mask.data = const_cast<uint16_t *>(values.data());
  fcg_flash_attn op{};
  op.q = Contiguous(FCG_TYPE_F32, 64, rows, 4, 1);
  op.k = Contiguous(FCG_TYPE_F16, 64, keys, 2, 1);
  op.v = op.k;
  op.out = Contiguous(FCG_TYPE_F32, 64, 4, rows, 1);
  op.mask = &mask;
  op.scale = 1.0f;
  lengths->assign(1, -1);
  fcg_plan plan;
  fcg_plan_op(&op, 1 << 20, lengths->data(), &plan);
  return plan;
}

TEST(GgmlMappingRules, MaskPatterns) {
  const uint16_t zero = 0, negative_zero = 0x8000, hidden = 0xfc00;
  std::vector<int64_t> lengths;
  // 3 rows x 6 keys, causal with two keys before the first row's.
  std::vector<uint16_t> causal = {
      zero, zero,   zero,   hidden, hidden,        hidden, zero, zero, zero,
      zero, hidden, hidden, zero,   negative_zero, zero,   zero, zero, hidden};
  EXPECT_EQ(PlanMask(causal, 3, 6, &lengths).mask_kind, FCG_MASK_CAUSAL);
  EXPECT_EQ(lengths[0], 5);
  std::vector<uint16_t> prefix = causal;
  for (int i = 0; i < 3; i++)
    std::memcpy(&prefix[i * 6], &causal[0], 6 * sizeof(uint16_t));
  EXPECT_EQ(PlanMask(prefix, 3, 6, &lengths).mask_kind, FCG_MASK_PREFIX);
  EXPECT_EQ(lengths[0], 3);
  // Any other value, NaN among them, or a hole, is copied.
  for (uint16_t other : {uint16_t(0x3c00) /* 1 */, uint16_t(0x7e00) /* NaN */,
                         uint16_t(0x7c00) /* +inf */, uint16_t(0x0001)}) {
    std::vector<uint16_t> changed = causal;
    changed[7] = other;
    EXPECT_EQ(PlanMask(changed, 3, 6, &lengths).mask_kind, FCG_MASK_COPY)
        << other;
  }
  std::vector<uint16_t> hole = causal;
  hole[13] = hidden;
  EXPECT_EQ(PlanMask(hole, 3, 6, &lengths).mask_kind, FCG_MASK_COPY);
  std::vector<uint16_t> skipped = causal; // row 2 sees two more, not one
  skipped[17] = zero;
  EXPECT_EQ(PlanMask(skipped, 3, 6, &lengths).mask_kind, FCG_MASK_COPY);
}

TEST(GgmlMappingRules, HalfToFloatConversion) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); i++) all[i] = static_cast<uint16_t>(i);
  // Odd lengths and offsets reach the vector loop's tail too.
  for (int64_t offset : {0, 3}) {
    std::vector<float> out(all.size() - offset);
    for (float factor : {1.0f, 0.375f}) {
      fcg_f16_to_f32_scaled(all.data() + offset, out.data(),
                            static_cast<int64_t>(out.size()), factor);
      for (size_t i = 0; i < out.size(); i++) {
        const float expected =
            static_cast<float>(DecodeHalf(all[i + offset])) * factor;
        if (std::isnan(expected))
          ASSERT_TRUE(std::isnan(out[i])) << i + offset;
        else
          ASSERT_EQ(out[i], expected) << i + offset;
      }
    }
  }
}

} // namespace
} // namespace fctest
