// Cases aimed at the prefill kernels' remainders and special paths, run
// against the float64 oracle on every kernel of the registry that takes
// them (the split-KV rows take those of up to 64 rows, the bf16-dot rows
// the bf16 ones), with the default teams and with two threads in one team.
//
// The cases aim at the kernel's remainders and special paths:
//  - head_dim 1, 7, 16, 33, 100 (generic) and 64, 80, 96, 128, 256 (compiled
//    in), v_head_dim != head_dim (generic), and v_head_dims leaving every
//    PV column tail (Dv % 6 and Dv % 12 from 1 to 11);
//  - query slots (rows x GQA group) not a multiple of the register block
//    (32 slots on AVX-512, 16 on AVX2 and NEON) nor of the tile (192 slots);
//  - kv lengths not a multiple of the 96-key KV block, shorter than a block,
//    per batch with 0 and 1; causal with L < S, L = S and L > S; sliding
//    windows on either side; tree and additive masks (each stride pattern);
//    softcap; GQA groups 1, 2, 4, 5, 8; f32/f16/bf16 for each of q, k, v, out
//    (bf16 q and k with even head_dim take AVX512-BF16 dot products where the
//    CPU has them, odd ones do not); BHSD, cache and unaligned strides; with
//    and without lse;
//  - the careful PV path for KV blocks whose V holds NaN/inf: such a value in
//    a key that causal, window, tree or additive -inf hides must not reach
//    the output, and in a visible key it poisons exactly that element.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

// How the context's threads are grouped: the defaults (here a team per
// core), or two threads in one team, so that a tile's register blocks and
// the K/V staging are shared between ranks (and a rank may have no block).
enum class Teams { kDefault, kOneTeamOfTwo };

// A context forcing the kernel with the team shape.
flashcpu_context *TeamContext(Kernel kernel, Teams teams) {
  if (teams == Teams::kDefault) return KernelContext(kernel);
  flashcpu_context *ctx = KernelContext(kernel, 2, FLASHCPU_TEAM_NUMA);
  if (ctx) {
    EXPECT_EQ(flashcpu_context_num_teams(ctx), 1)
        << "two threads should form one team";
  }
  return ctx;
}

std::string TeamsName(Teams teams) {
  return teams == Teams::kOneTeamOfTwo ? "team2__" : "";
}

// ---- the oracle sweep ------------------------------------------------------

struct PrefillCase {
  const char *name;
  std::function<void(AttentionCase &)> configure;
};

const PrefillCase kCases[] = {
    // head_dim remainders (generic path) and slot counts off the register block
    {"d1_group1_kv_shorter_than_a_block",
     [](AttentionCase &c) {
       c.batch(2).q_len(37).kv_len(29).heads(2, 2).head_dim(1);
     }},
    {"d7_dv13_group5_two_tiles_causal", // 225 slots: a 190-slot tile and a
                                        // 35-slot one
     [](AttentionCase &c) {
       c.q_len(45).kv_len(100).heads(5, 1).head_dim(7).v_head_dim(13).causal();
     }},
    {"d16_group1_tile_remainder_causal_L_gt_S", // tiles of 192 and 8 rows
     [](AttentionCase &c) {
       c.q_len(200).kv_len(53).heads(1, 1).head_dim(16).causal();
     }},
    {"d33_bf16_odd_dim_group2",
     [](AttentionCase &c) {
       c.q_len(23).kv_len(71).heads(4, 2).head_dim(33).dtypes(BF16, BF16, BF16);
     }},
    {"d100_additive_full_large",
     [](AttentionCase &c) {
       c.q_len(21)
           .kv_len(150)
           .heads(3, 3)
           .head_dim(100)
           .additive(AdditivePattern::kFull, 0.2)
           .magnitude(Magnitude::kLarge);
     }},
    // the compiled-in head_dims
    {"d64_f16_group4_causal_L_lt_S",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(70)
           .kv_len(130)
           .heads(8, 2)
           .head_dim(64)
           .dtypes(F16, F16, F16)
           .causal();
     }},
    {"d80_bf16_window_left_right",
     [](AttentionCase &c) {
       c.q_len(33)
           .kv_len(97)
           .heads(4, 2)
           .head_dim(80)
           .dtypes(BF16, BF16, BF16)
           .window(20, 3);
     }},
    {"d96_group8_tree_three_tiles", // 24 rows per tile: 24, 24, 2
     [](AttentionCase &c) {
       c.q_len(50).kv_len(50).heads(8, 1).head_dim(96).tree(30);
     }},
    {"d128_f16_softcap_large_out_bf16",
     [](AttentionCase &c) {
       c.q_len(40)
           .kv_len(145)
           .heads(4, 2)
           .head_dim(128)
           .dtypes(F16, F16, BF16)
           .softcap(30.0f)
           .magnitude(Magnitude::kLarge);
     }},
    {"d256_bhsd_mixed_dtypes_causal",
     [](AttentionCase &c) {
       c.q_len(19)
           .kv_len(61)
           .heads(2, 1)
           .head_dim(256)
           .dtypes(BF16, F16, F32, F16)
           .causal()
           .layout(Layout::kBHSD);
     }},
    {"d256_bf16_large_window",
     [](AttentionCase &c) {
       c.q_len(12)
           .kv_len(100)
           .heads(2, 2)
           .head_dim(256)
           .dtypes(BF16, BF16, BF16)
           .window(30, 30)
           .magnitude(Magnitude::kLarge);
     }},
    // v_head_dim != head_dim; every PV column tail
    {"d64_dv80",
     [](AttentionCase &c) {
       c.q_len(30).kv_len(77).heads(4, 4).head_dim(64).v_head_dim(80);
     }},
    {"d128_dv1_group2",
     [](AttentionCase &c) {
       c.q_len(35).kv_len(50).heads(2, 1).head_dim(128).v_head_dim(1).causal();
     }},
    {"d16_dv256_bf16",
     [](AttentionCase &c) {
       c.q_len(17).kv_len(49).heads(2, 2).head_dim(16).v_head_dim(256).dtypes(
           BF16, BF16, BF16);
     }},
    {"d8_dv9_tail_9_and_3",
     [](AttentionCase &c) {
       c.batch(3)
           .q_len(9)
           .kv_len(60)
           .heads(2, 1)
           .head_dim(8)
           .v_head_dim(9)
           .causal();
     }},
    {"d12_dv23_tail_11_and_5",
     [](AttentionCase &c) {
       c.q_len(20).kv_len(58).heads(3, 3).head_dim(12).v_head_dim(23);
     }},
    {"d96_dv10_tail_10_and_4_f16",
     [](AttentionCase &c) {
       c.q_len(18).kv_len(66).heads(4, 1).head_dim(96).v_head_dim(10).dtypes(
           F16, F16, F32);
     }},
    {"d20_dv7_tail_7_and_1",
     [](AttentionCase &c) {
       c.q_len(16).kv_len(96).heads(2, 1).head_dim(20).v_head_dim(7).window(10,
                                                                            0);
     }},
    {"d24_dv3_tail_3",
     [](AttentionCase &c) {
       c.q_len(34).kv_len(40).heads(4, 2).head_dim(24).v_head_dim(3);
     }},
    // kv lengths
    {"kv_lengths_0_1_47_97",
     [](AttentionCase &c) {
       c.batch(4).q_len(30).kv_len(97).heads(4, 2).head_dim(16).kv_lengths(
           {0, 1, 47, 97});
     }},
    {"kv_lengths_causal_window_f16",
     [](AttentionCase &c) {
       c.batch(3)
           .q_len(60)
           .kv_len(100)
           .heads(2, 1)
           .head_dim(64)
           .dtypes(F16, F16, F16)
           .kv_lengths({1, 0, 96})
           .causal()
           .window(10, -1);
     }},
    {"kv_len_1",
     [](AttentionCase &c) { c.q_len(40).kv_len(1).heads(3, 1).head_dim(16); }},
    {"kv_len_49_one_block_and_one_key",
     [](AttentionCase &c) {
       c.q_len(64).kv_len(49).heads(2, 2).head_dim(32).causal();
     }},
    {"kv_len_500_many_blocks",
     [](AttentionCase &c) {
       c.q_len(8).kv_len(500).heads(2, 2).head_dim(32).dtypes(F32, F16, F32);
     }},
    // causal alignment
    {"causal_L_eq_S_diagonal_blocks",
     [](AttentionCase &c) {
       c.q_len(150).kv_len(150).heads(2, 1).head_dim(32).causal();
     }},
    {"causal_L_gt_S_window_group5", // 77 rows in tiles of 38, 38, 1
     [](AttentionCase &c) {
       c.q_len(77).kv_len(30).heads(5, 1).head_dim(16).causal().window(7, -1);
     }},
    // sliding windows
    {"window_0_0",
     [](AttentionCase &c) {
       c.q_len(60).kv_len(100).heads(2, 2).head_dim(16).window(0, 0);
     }},
    {"window_right_only",
     [](AttentionCase &c) {
       c.q_len(50).kv_len(120).heads(4, 2).head_dim(16).window(-1, 10);
     }},
    {"window_left_and_right_L_gt_S",
     [](AttentionCase &c) {
       c.q_len(90).kv_len(60).heads(2, 1).head_dim(16).window(5, 7);
     }},
    {"window_wider_than_S_causal",
     [](AttentionCase &c) {
       c.q_len(40)
           .kv_len(70)
           .heads(2, 2)
           .head_dim(16)
           .window(200, 200)
           .causal();
     }},
    {"window_47_0_block_edges",
     [](AttentionCase &c) {
       c.q_len(96).kv_len(144).heads(1, 1).head_dim(16).window(47, 0);
     }},
    // tree masks
    {"tree_60_of_100_causal",
     [](AttentionCase &c) {
       c.q_len(20).kv_len(100).heads(4, 2).head_dim(16).tree(60).causal();
     }},
    {"tree_broadcast_kv_lengths",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(25)
           .kv_len(100)
           .heads(2, 1)
           .head_dim(16)
           .tree(45, 0.5, true)
           .kv_lengths({100, 64});
     }},
    {"tree_over_every_key_sparse_bf16",
     [](AttentionCase &c) {
       c.q_len(33).kv_len(33).heads(5, 5).head_dim(64).tree(33, 0.2).dtypes(
           BF16, BF16, F32);
     }},
    // additive masks
    {"additive_broadcast_batch_causal",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(30)
           .kv_len(80)
           .heads(4, 2)
           .head_dim(16)
           .additive(AdditivePattern::kBroadcastBatch, 0.3)
           .causal();
     }},
    {"additive_broadcast_heads_window_f16",
     [](AttentionCase &c) {
       c.q_len(26)
           .kv_len(90)
           .heads(8, 2)
           .head_dim(64)
           .dtypes(F16, F16, F16)
           .additive(AdditivePattern::kBroadcastHeads, 0.3)
           .window(30, 5);
     }},
    {"additive_key_padding_kv_lengths",
     [](AttentionCase &c) {
       c.batch(3)
           .q_len(20)
           .kv_len(70)
           .heads(2, 2)
           .head_dim(16)
           .additive(AdditivePattern::kKeyPadding, 0.3)
           .kv_lengths({70, 0, 33});
     }},
    {"additive_key_major_group5",
     [](AttentionCase &c) {
       c.q_len(41).kv_len(60).heads(5, 1).head_dim(16).additive(
           AdditivePattern::kKeyMajor, 0.3);
     }},
    {"additive_mostly_hidden_softcap", // many rows see nothing at all
     [](AttentionCase &c) {
       c.q_len(30)
           .kv_len(50)
           .heads(2, 1)
           .head_dim(32)
           .additive(AdditivePattern::kFull, 0.97)
           .softcap(2.0f);
     }},
    // softcap
    {"softcap_small_causal_group8",
     [](AttentionCase &c) {
       c.q_len(27).kv_len(75).heads(8, 1).head_dim(16).softcap(0.5f).causal();
     }},
    {"softcap_additive_tree_large",
     [](AttentionCase &c) {
       c.q_len(14)
           .kv_len(64)
           .heads(4, 2)
           .head_dim(80)
           .softcap(50.0f)
           .additive()
           .tree(20)
           .magnitude(Magnitude::kLarge);
     }},
    // dtypes and strides
    {"f16_all_cache_layout",
     [](AttentionCase &c) {
       c.batch(2)
           .q_len(31)
           .kv_len(75)
           .heads(4, 4)
           .head_dim(64)
           .dtypes(F16, F16, F16)
           .layout(Layout::kCache)
           .kv_lengths({75, 50})
           .causal();
     }},
    {"bf16_all_unaligned",
     [](AttentionCase &c) {
       c.q_len(29)
           .kv_len(61)
           .heads(4, 2)
           .head_dim(128)
           .dtypes(BF16, BF16, BF16)
           .layout(Layout::kUnaligned);
     }},
    {"f32_q_f16_k_bf16_v_f16_out_bhsd",
     [](AttentionCase &c) {
       c.q_len(22)
           .kv_len(55)
           .heads(2, 1)
           .head_dim(96)
           .dtypes(F32, F16, BF16, F16)
           .layout(Layout::kBHSD);
     }},
    {"bf16_q_f32_k_large_no_lse",
     [](AttentionCase &c) {
       c.q_len(18)
           .kv_len(60)
           .heads(4, 2)
           .head_dim(64)
           .dtypes(BF16, F32, F32, BF16)
           .magnitude(Magnitude::kLarge)
           .with_lse(false);
     }},
};

struct SweepParam {
  Teams teams;
  const PrefillCase *test_case;
  uint64_t seed;
};

std::vector<SweepParam> SweepParams() {
  std::vector<SweepParam> params;
  for (Teams teams : {Teams::kDefault, Teams::kOneTeamOfTwo}) {
    uint64_t seed = teams == Teams::kDefault ? 101 : 1101;
    for (const PrefillCase &c : kCases) params.push_back({teams, &c, seed++});
  }
  return params;
}

using PrefillKernel = KernelSuite<SweepParam>;

TEST_P(PrefillKernel, MatchesOracle) {
  const SweepParam &p = test_case();
  flashcpu_context *ctx = TeamContext(kernel(), p.teams);
  ASSERT_NE(ctx, nullptr);
  AttentionCase c;
  p.test_case->configure(c);
  c.seed(p.seed);
  Check(c, ctx);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PrefillKernel,
    testing::ValuesIn(ForEveryKernel<SweepParam>(
        SweepParams(),
        TakesConfigured<SweepParam>([](AttentionCase &c, const SweepParam &p) {
          p.test_case->configure(c);
        }))),
    KernelParamName<SweepParam>([](const SweepParam &p) {
      return TeamsName(p.teams) + p.test_case->name;
    }));

// ---- non-finite V and the careful PV path -----------------------------------

class PrefillNonFiniteValues : public KernelSuite<Teams> {
protected:
  void SetUp() override {
    KernelSuite<Teams>::SetUp();
    if (IsSkipped()) return;
    ctx_ = TeamContext(kernel(), test_case());
    ASSERT_NE(ctx_, nullptr);
  }
  flashcpu_context *ctx_ = nullptr;
};

// For every (row, head) of batch 0: column `d` of the output is NaN exactly
// when `sees(i, h)`, every other element and the lse are finite, or 0 and
// -inf for rows that see nothing.
void ExpectNanExactlyWhere(const AttentionCase &c, int64_t q_len,
                           int64_t q_heads, int64_t v_head_dim, int64_t d,
                           const std::function<bool(int64_t, int64_t)> &sees) {
  int wrong = 0;
  for (int64_t i = 0; i < q_len; i++)
    for (int64_t h = 0; h < q_heads; h++) {
      const bool expect_nan = sees(i, h);
      for (int64_t e = 0; e < v_head_dim; e++) {
        const double x = c.out_at(0, i, h, e);
        const bool ok = e == d && expect_nan ? std::isnan(x) : std::isfinite(x);
        if (!ok && wrong++ < 8)
          ADD_FAILURE() << "row " << i << " head " << h << " column " << e
                        << ": " << x
                        << (e == d && expect_nan ? " (expected NaN)"
                                                 : " (expected finite)");
      }
      const float lse = c.lse_at(0, h, i);
      if (std::isnan(lse) && wrong++ < 8)
        ADD_FAILURE() << "row " << i << " head " << h
                      << ": lse NaN (V does not enter lse)";
    }
  EXPECT_EQ(wrong, 0) << c.Describe();
}

// Causal L = S = 100: KV block [0, 96) is seen partly by the rows of each
// register block around the diagonal. V of key 60 (kv head 1) holds
// `poison` in column 5: rows 60+ of heads 2, 3 see it, rows below do not.
TEST_P(PrefillNonFiniteValues, HiddenByCausalInAPartialBlock) {
  for (flashcpu_dtype dtype : {F32, F16, BF16})
    for (float poison : {NAN, INFINITY, -INFINITY}) {
      AttentionCase c;
      c.q_len(100)
          .kv_len(100)
          .heads(4, 2)
          .head_dim(16)
          .causal()
          .dtypes(dtype, dtype, dtype)
          .seed(7)
          .Build();
      c.v().Set(0, 60, 1, 5, poison);
      if (!Check(c, ctx_)) continue;
      if (std::isnan(poison))
        ExpectNanExactlyWhere(c, 100, 4, 16, 5, [](int64_t i, int64_t h) {
          return h >= 2 && i >= 60;
        });
      else // inf in a visible V: that column is inf or NaN, never finite
        for (int64_t i = 0; i < 100; i++)
          for (int64_t h = 0; h < 4; h++)
            ASSERT_EQ(std::isfinite(c.out_at(0, i, h, 5)), !(h >= 2 && i >= 60))
                << "row " << i << " head " << h << " " << c.Describe();
    }
}

// A short block (kv 70: keys [0, 70) of a 96-key block) under a sliding window:
// V of key 52 is NaN and visible only to the rows whose window holds it.
TEST_P(PrefillNonFiniteValues, HiddenByWindowInAShortBlock) {
  constexpr int64_t kL = 40, kS = 70, kKey = 52, kLeft = 6, kRight = 2;
  AttentionCase c;
  c.q_len(kL)
      .kv_len(kS)
      .heads(2, 1)
      .head_dim(16)
      .window(kLeft, kRight)
      .seed(8)
      .Build();
  c.v().Set(0, kKey, 0, 3, NAN);
  if (!Check(c, ctx_)) return;
  ExpectNanExactlyWhere(c, kL, 2, 16, 3, [&](int64_t i, int64_t) {
    const int64_t position = i + kS - kL;
    return position - kLeft <= kKey && kKey <= position + kRight;
  });
}

// Tree mask over the newest 40 of 100 keys (region [60, 100)): V of key 75
// (tree bit 15) is NaN; even rows have the bit set, odd rows not.
TEST_P(PrefillNonFiniteValues, HiddenByTreeMask) {
  for (bool causal : {false, true}) {
    constexpr int64_t kL = 24, kS = 100;
    AttentionCase c;
    c.q_len(kL)
        .kv_len(kS)
        .heads(4, 2)
        .head_dim(16)
        .tree(40)
        .causal(causal)
        .seed(9)
        .Build();
    for (int64_t i = 0; i < kL; i++) c.set_tree_bit(0, i, 15, i % 2 == 0);
    c.v().Set(0, 75, 1, 11, NAN);
    if (!Check(c, ctx_)) continue;
    ExpectNanExactlyWhere(c, kL, 4, 16, 11, [&](int64_t i, int64_t h) {
      return h >= 2 && i % 2 == 0 && (!causal || 75 <= i + kS - kL);
    });
  }
}

// Additive -inf for some (head, row) pairs on key 70, whose V is NaN; with
// and without causal (a partial and a fully visible block), f32 and bf16.
TEST_P(PrefillNonFiniteValues, HiddenByAdditiveMinusInfinity) {
  for (flashcpu_dtype dtype : {F32, BF16})
    for (bool causal : {false, true}) {
      constexpr int64_t kL = 20, kS = 100, kKey = 70;
      AttentionCase c;
      c.q_len(kL)
          .kv_len(kS)
          .heads(4, 2)
          .head_dim(16)
          .dtypes(dtype, dtype, dtype)
          .additive(AdditivePattern::kFull, 0.0)
          .causal(causal)
          .seed(10)
          .Build();
      auto hidden = [](int64_t i, int64_t h) { return (i + h) % 3 == 0; };
      for (int64_t h = 0; h < 4; h++)
        for (int64_t i = 0; i < kL; i++)
          if (hidden(i, h)) c.additive_at(0, h, i, kKey) = -INFINITY;
      c.v().Set(0, kKey, 1, 4, NAN);
      if (!Check(c, ctx_)) continue;
      ExpectNanExactlyWhere(c, kL, 4, 16, 4, [&](int64_t i, int64_t h) {
        return h >= 2 && !hidden(i, h) && (!causal || kKey <= i + kS - kL);
      });
    }
}

// NaN in a V every row sees (no mask), in several KV blocks and columns
// (compiled-in head_dim, a column tail and the generic path): exactly those
// columns of the rows of that kv head become NaN.
TEST_P(PrefillNonFiniteValues, VisibleNanPoisonsExactlyThatElement) {
  struct Shape {
    int64_t head_dim, v_head_dim, column, key;
  };
  for (const Shape &s :
       {Shape{64, 64, 63, 47}, Shape{16, 23, 22, 48}, Shape{7, 13, 0, 99}})
    for (flashcpu_dtype dtype : {F32, F16}) {
      constexpr int64_t kL = 37, kS = 100;
      AttentionCase c;
      c.q_len(kL)
          .kv_len(kS)
          .heads(6, 2)
          .head_dim(s.head_dim)
          .v_head_dim(s.v_head_dim)
          .dtypes(dtype, dtype, dtype)
          .seed(11)
          .Build();
      c.v().Set(0, s.key, 0, s.column, NAN);
      if (!Check(c, ctx_)) continue;
      ExpectNanExactlyWhere(c, kL, 6, s.v_head_dim, s.column,
                            [](int64_t, int64_t h) { return h < 3; });
    }
}

INSTANTIATE_TEST_SUITE_P(Teams, PrefillNonFiniteValues,
                         testing::ValuesIn(ForEveryKernel<Teams>(
                             {Teams::kDefault, Teams::kOneTeamOfTwo})),
                         KernelParamName<Teams>([](const Teams &teams) {
                           return teams == Teams::kOneTeamOfTwo
                                      ? std::string("team2")
                                      : std::string("default_teams");
                         }));

} // namespace
} // namespace fctest
