// Cases whose output is exact whatever the rounding (structural_inputs.h):
// Q = 0 gives the plain mean of the visible V rows, and ranked keys give
// exactly the best visible key's V row. A wrong mask, GQA mapping, tile
// edge or kv length changes which rows are averaged or which key wins, so
// these catch such bugs with no tolerance to hide behind.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"
#include "fixtures.h"
#include "structural_inputs.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

struct Config {
  const char *name;
  int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim;
  bool causal;
  int64_t window_left, window_right;
  int64_t tree_keys;               // 0: none
  double additive_hidden_fraction; // < 0: none; else a 0 / -inf mask
  std::vector<int64_t> kv_lengths;
  Layout layout;
};

const Config kConfigs[] = {
    {"causal_fewer_queries_than_keys",
     2,
     70,
     200,
     4,
     2,
     64,
     true,
     -1,
     -1,
     0,
     -1,
     {},
     Layout::kBSHD},
    {"causal_more_queries_than_keys",
     1,
     150,
     40,
     7,
     1,
     72,
     true,
     -1,
     -1,
     0,
     -1,
     {},
     Layout::kBHSD},
    {"window_both_sides",
     1,
     130,
     130,
     2,
     2,
     80,
     false,
     10,
     3,
     0,
     -1,
     {},
     Layout::kCache},
    {"window_causal_kv_lengths",
     2,
     65,
     200,
     8,
     2,
     96,
     true,
     31,
     -1,
     0,
     -1,
     {200, 77},
     Layout::kUnaligned},
    {"tree_two_words_causal",
     2,
     20,
     150,
     4,
     4,
     128,
     true,
     -1,
     -1,
     70,
     -1,
     {},
     Layout::kBSHD},
    {"tree_all_keys_kv_lengths",
     2,
     9,
     100,
     6,
     2,
     16,
     false,
     -1,
     -1,
     60,
     -1,
     {100, 61},
     Layout::kBHSD},
    {"additive_hides_keys",
     2,
     33,
     129,
     3,
     3,
     100,
     false,
     -1,
     -1,
     0,
     0.3,
     {},
     Layout::kBSHD},
    {"additive_window_tree",
     1,
     66,
     190,
     4,
     1,
     8,
     true,
     50,
     0,
     9,
     0.2,
     {},
     Layout::kCache},
    {"mqa_sixteen_heads",
     1,
     17,
     64,
     16,
     1,
     1,
     true,
     -1,
     -1,
     0,
     -1,
     {},
     Layout::kBSHD},
    {"decode_gqa4",
     3,
     1,
     256,
     8,
     2,
     256,
     false,
     -1,
     -1,
     0,
     -1,
     {256, 1, 129},
     Layout::kBHSD},
    {"single_key", 2, 5, 1, 2, 1, 64, true, -1, -1, 0, -1, {}, Layout::kBSHD},
};

struct StructuralParam {
  const Config *config;
  flashcpu_dtype q, kv, out;
};

std::vector<StructuralParam> Params() {
  std::vector<StructuralParam> params;
  for (const Config &config : kConfigs) {
    params.push_back({&config, F32, F32, F32});
    params.push_back({&config, F16, F16, BF16});
    params.push_back({&config, BF16, BF16, F16});
  }
  return params;
}

std::string ParamName(const StructuralParam &p) {
  return std::string(p.config->name) + "__" + flashcpu_dtype_name(p.q) + "_" +
         flashcpu_dtype_name(p.kv) + "_" + flashcpu_dtype_name(p.out);
}

// Configures the case; Build() is left to the caller.
void Configure(AttentionCase &c, const StructuralParam &p) {
  const Config &config = *p.config;
  c.batch(config.batch)
      .q_len(config.q_len)
      .kv_len(config.kv_len)
      .heads(config.q_heads, config.kv_heads)
      .head_dim(config.head_dim)
      .dtypes(p.q, p.kv, p.out)
      .layout(config.layout)
      .causal(config.causal)
      .window(config.window_left, config.window_right)
      .seed(7);
  if (config.tree_keys) c.tree(config.tree_keys, 0.6);
  if (config.additive_hidden_fraction >= 0)
    c.additive(AdditivePattern::kFull, config.additive_hidden_fraction);
  if (!config.kv_lengths.empty()) c.kv_lengths(config.kv_lengths);
}

// A 0 / -inf additive mask is a pure mask: it keeps Q = 0 scores equal.
void MakeAdditiveMaskPure(AttentionCase &c, const Config &config) {
  if (config.additive_hidden_fraction < 0) return;
  for (int64_t b = 0; b < config.batch; b++)
    for (int64_t h = 0; h < config.q_heads; h++)
      for (int64_t i = 0; i < config.q_len; i++)
        for (int64_t j = 0; j < c.kv_length_of(b); j++) {
          float &value = c.additive_at(b, h, i, j);
          if (value != -INFINITY) value = 0.0f;
        }
}

using StructuralExact = KernelSuite<StructuralParam>;

TEST_P(StructuralExact, ZeroQueryGivesMeanOfVisibleValues) {
  const StructuralParam &p = test_case();
  const Config &config = *p.config;
  AttentionCase c;
  Configure(c, p);
  c.Build();
  SetZeroQueries(c);
  SetExactValues(c, 11);
  MakeAdditiveMaskPure(c, config);
  if (!RunOk(c)) return;

  int64_t rows_checked = 0;
  for (int64_t b = 0; b < config.batch; b++)
    for (int64_t h = 0; h < config.q_heads; h++)
      for (int64_t i = 0; i < config.q_len; i++) {
        double lse;
        // With Q = 0 the oracle's row is the mean of the visible V rows.
        const std::vector<double> mean = c.OracleRow(b, h, i, &lse);
        for (int64_t d = 0; d < config.head_dim; d++) {
          const double expected = mean[static_cast<size_t>(d)];
          const double got = c.out_at(b, i, h, d);
          // The sum of m/64 values is exact in f32; only 1/count and the
          // final rounding to the output dtype may cost an ulp.
          const double ulp =
              UlpOf(p.out, std::fmax(std::fabs(expected), std::fabs(got)));
          ASSERT_LE(std::fabs(got - expected), (p.out == F32 ? 2 : 1) * ulp)
              << "b=" << b << " h=" << h << " i=" << i << " d=" << d << " got "
              << got << " expected mean " << expected << "; " << c.Describe();
        }
        // lse of k zero scores is log(k), exactly -inf for none.
        if (lse == -INFINITY) {
          EXPECT_EQ(c.lse_at(b, h, i), -INFINITY);
        } else {
          EXPECT_NEAR(c.lse_at(b, h, i), lse, 4e-7 * std::fmax(1.0, lse));
        }
        rows_checked++;
      }
  EXPECT_EQ(rows_checked, config.batch * config.q_heads * config.q_len);
}

TEST_P(StructuralExact, ScoreGapGivesExactlyTheWinningValueRow) {
  const StructuralParam &p = test_case();
  const Config &config = *p.config;
  AttentionCase c;
  Configure(c, p);
  c.scale(kRankScale).Build();
  RankKeys(c);
  SetExactValues(c, 13);
  if (!RunOk(c)) return;

  int64_t rows_with_a_winner = 0;
  for (int64_t b = 0; b < config.batch; b++)
    for (int64_t h = 0; h < config.q_heads; h++)
      for (int64_t i = 0; i < config.q_len; i++) {
        double lse;
        // The oracle's weights other than the winner's are below 1e-80:
        // its row is the winner's V row, exactly.
        const std::vector<double> winner = c.OracleRow(b, h, i, &lse);
        for (int64_t d = 0; d < config.head_dim; d++)
          ASSERT_EQ(c.out_at(b, i, h, d), winner[static_cast<size_t>(d)])
              << "b=" << b << " h=" << h << " i=" << i << " d=" << d << "; "
              << c.Describe();
        if (lse == -INFINITY) {
          EXPECT_EQ(c.lse_at(b, h, i), -INFINITY);
        } else {
          // lse is the winner's score, up to the f32 rounding of a large
          // score: its dot product summed in 4 to 32 lanes, the log2(e)
          // and ln(2) products (NEON's 4-lane split-KV: 12 ulp measured).
          EXPECT_NEAR(c.lse_at(b, h, i), lse, 32 * UlpOf(F32, lse))
              << "b=" << b << " h=" << h << " i=" << i;
          rows_with_a_winner++;
        }
      }
  EXPECT_GT(rows_with_a_winner, 0);
}

INSTANTIATE_TEST_SUITE_P(Configs, StructuralExact,
                         testing::ValuesIn(ForEveryKernel<StructuralParam>(
                             Params(),
                             TakesConfigured<StructuralParam>(Configure))),
                         KernelParamName<StructuralParam>(ParamName));

using StructuralExactGqa = KernelOnly;

// GQA: every query head of a group reads its own kv head, h / (Hq / Hkv).
// With one key per kv head and Q = 0, each output row is that kv head's V
// row, so a wrong mapping is caught exactly.
TEST_P(StructuralExactGqa, EachQueryHeadReadsItsKvHead) {
  // Groups above 64 leave one query row per tile.
  for (auto [q_heads, kv_heads] : {std::pair<int64_t, int64_t>{12, 3},
                                   {7, 7},
                                   {14, 2},
                                   {5, 1},
                                   {96, 1},
                                   {130, 2}}) {
    AttentionCase c;
    c.q_len(70).kv_len(1).heads(q_heads, kv_heads).head_dim(4).Build();
    SetZeroQueries(c);
    SetExactValues(c, 17);
    if (!RunOk(c)) continue;
    const int64_t group = q_heads / kv_heads;
    for (int64_t h = 0; h < q_heads; h++)
      for (int64_t i = 0; i < 70; i++)
        for (int64_t d = 0; d < 4; d++)
          ASSERT_EQ(c.out_at(0, i, h, d), c.v().Get(0, 0, h / group, d))
              << "q head " << h << " of " << q_heads << "/" << kv_heads
              << " row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, StructuralExactGqa,
                         testing::ValuesIn(ForEveryKernel()), KernelOnlyName);

} // namespace
} // namespace fctest
