// Random attention cases against the oracle over dtype x mask kind x layout
// x GQA ratio x head_dim x lengths, on every kernel of the registry (each
// row gets the cases its takes() accepts). The full product is far too large,
// so the sweep is a covering design: a few pairs of dimensions are crossed in
// full, the other dimensions of each case are drawn from a fixed seed, and
// a last suite draws every dimension at random. Every case name spells its
// configuration, so a failure can be rerun alone with --gtest_filter.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "kernel_tester.h"
#include "test_tensor.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

struct DtypeSet {
  flashcpu_dtype q, k, v, out;
};
const DtypeSet kDtypeSets[] = {
    {F32, F32, F32, F32},   {F16, F16, F16, F16},    {BF16, BF16, BF16, BF16},
    {F16, F16, F16, F32},   {BF16, BF16, BF16, F32}, {F32, F16, F16, F32},
    {F32, BF16, F16, BF16}, {BF16, F16, F32, F16},
};

enum MaskBits : unsigned {
  kCausal = 1,
  kWindow = 2,
  kTree = 4,
  kAdditive = 8,
  kSoftcap = 16,
};
const unsigned kMaskKinds[] = {
    0,
    kCausal,
    kWindow,
    kTree,
    kAdditive,
    kSoftcap,
    kCausal | kWindow,
    kCausal | kTree,
    kCausal | kSoftcap,
    kWindow | kAdditive,
    kTree | kAdditive | kSoftcap,
    kWindow | kTree,
    kCausal | kWindow | kTree | kAdditive | kSoftcap,
};

const Layout kLayouts[] = {Layout::kBSHD, Layout::kBHSD, Layout::kCache,
                           Layout::kUnaligned};

struct Gqa {
  int64_t q_heads, kv_heads;
};
// Ratios 1, 2, 4, 7 and MQA; 7 gives tiles of 9 query rows.
const Gqa kGqas[] = {{3, 3}, {4, 2}, {8, 2}, {14, 2}, {5, 1}};

const int64_t kHeadDims[] = {1, 64, 72, 80, 96, 100, 128, 256};

struct Lengths {
  int64_t q_len, kv_len;
};
// L != S both ways, L = 1, S = 0, S = 1, and lengths on and off the tile
// sizes (64 keys per block, 64 / group query rows per tile). Cheapest first.
const Lengths kLengths[] = {{1, 0},   {1, 1},    {3, 1},    {9, 16},
                            {37, 37}, {1, 300},  {64, 64},  {100, 33},
                            {5, 257}, {130, 70}, {65, 129}, {70, 150}};

template <typename T, size_t N> constexpr int Count(const T (&)[N]) {
  return static_cast<int>(N);
}

struct SweepCase {
  int dtypes = 0, mask = 0, layout = 0, gqa = 0, head_dim = 0, lengths = 0;
  int64_t batch = 2;
  bool large = false, kv_lengths = false, lse = true;
  uint64_t seed = 0;
};

// Multiply-adds of one oracle pass; cases above the budget are shrunk along
// the dimensions their suite does not cross, so the suite stays fast.
constexpr int64_t kWorkBudget = 6'000'000;
int64_t Work(const SweepCase &c) {
  const Lengths &n = kLengths[c.lengths];
  return c.batch * kGqas[c.gqa].q_heads * n.q_len *
         std::max<int64_t>(n.kv_len, 1) * 2 * kHeadDims[c.head_dim];
}

struct Fixed {
  bool lengths = false, head_dim = false, gqa = false;
};

SweepCase Fit(SweepCase c, Fixed fixed) {
  while (Work(c) > kWorkBudget) {
    if (c.batch > 1)
      c.batch = 1;
    else if (!fixed.lengths && c.lengths > 0)
      c.lengths--;
    else if (!fixed.head_dim && kHeadDims[c.head_dim] > 64)
      c.head_dim = 1; // d = 64
    else if (!fixed.gqa && kGqas[c.gqa].q_heads > 4)
      c.gqa = 1;
    else
      break;
  }
  return c;
}

// The dimensions a suite does not cross, drawn from a fixed seed.
SweepCase Draw(Rng &rng, uint64_t seed) {
  SweepCase c;
  c.dtypes = static_cast<int>(rng.Below(Count(kDtypeSets)));
  c.mask = static_cast<int>(rng.Below(Count(kMaskKinds)));
  c.layout = static_cast<int>(rng.Below(Count(kLayouts)));
  c.gqa = static_cast<int>(rng.Below(Count(kGqas)));
  c.head_dim = static_cast<int>(rng.Below(Count(kHeadDims)));
  c.lengths = static_cast<int>(rng.Below(Count(kLengths)));
  c.batch = rng.Chance(0.7) ? 2 : 1;
  c.large = rng.Chance(0.4);
  c.kv_lengths = rng.Chance(0.25);
  c.lse = rng.Chance(0.85);
  c.seed = seed;
  return c;
}

std::vector<SweepCase> DtypeByMask() {
  std::vector<SweepCase> cases;
  Rng rng(101);
  for (int d = 0; d < Count(kDtypeSets); d++)
    for (int m = 0; m < Count(kMaskKinds); m++) {
      SweepCase c = Draw(rng, cases.size() + 1000);
      c.dtypes = d;
      c.mask = m;
      cases.push_back(Fit(c, {}));
    }
  return cases;
}

std::vector<SweepCase> HeadDimByLayout() {
  std::vector<SweepCase> cases;
  Rng rng(202);
  for (int h = 0; h < Count(kHeadDims); h++)
    for (int l = 0; l < Count(kLayouts); l++) {
      SweepCase c = Draw(rng, cases.size() + 2000);
      c.head_dim = h;
      c.layout = l;
      cases.push_back(Fit(c, {false, true, false}));
    }
  return cases;
}

std::vector<SweepCase> GqaByLengths() {
  std::vector<SweepCase> cases;
  Rng rng(303);
  for (int g = 0; g < Count(kGqas); g++)
    for (int n = 0; n < Count(kLengths); n++) {
      SweepCase c = Draw(rng, cases.size() + 3000);
      c.gqa = g;
      c.lengths = n;
      cases.push_back(Fit(c, {true, false, true}));
    }
  return cases;
}

std::vector<SweepCase> MaskByLengths() {
  std::vector<SweepCase> cases;
  Rng rng(404);
  for (int m = 0; m < Count(kMaskKinds); m++)
    for (int n = 0; n < Count(kLengths); n++) {
      SweepCase c = Draw(rng, cases.size() + 4000);
      c.mask = m;
      c.lengths = n;
      cases.push_back(Fit(c, {true, false, false}));
    }
  return cases;
}

std::vector<SweepCase> RandomMix() {
  std::vector<SweepCase> cases;
  Rng rng(505);
  for (int n = 0; n < 48; n++) cases.push_back(Fit(Draw(rng, 5000 + n), {}));
  return cases;
}

std::string DtypeSetName(const DtypeSet &s) {
  return std::string(flashcpu_dtype_name(s.q)) + "_" +
         flashcpu_dtype_name(s.k) + "_" + flashcpu_dtype_name(s.v) + "_" +
         flashcpu_dtype_name(s.out);
}

std::string MaskName(unsigned mask) {
  if (mask == 0) return "nomask";
  std::string name;
  const char *names[] = {"causal", "window", "tree", "additive", "softcap"};
  for (int bit = 0; bit < 5; bit++)
    if (mask & (1u << bit))
      name += (name.empty() ? "" : "_") + std::string(names[bit]);
  return name;
}

std::string CaseName(const SweepCase &c, size_t index) {
  const Lengths &n = kLengths[c.lengths];
  return DtypeSetName(kDtypeSets[c.dtypes]) + "__" +
         MaskName(kMaskKinds[c.mask]) + "__" + LayoutName(kLayouts[c.layout]) +
         "__h" + std::to_string(kGqas[c.gqa].q_heads) + "_" +
         std::to_string(kGqas[c.gqa].kv_heads) + "__d" +
         std::to_string(kHeadDims[c.head_dim]) + "__L" +
         std::to_string(n.q_len) + "_S" + std::to_string(n.kv_len) + "__b" +
         std::to_string(c.batch) + (c.kv_lengths ? "_kvlen" : "") +
         (c.lse ? "" : "_nolse") + (c.large ? "__large" : "__small") + "__" +
         std::to_string(index);
}

// Shape of the case (what a row's takes() reads); the options are drawn
// by Configure below.
void ConfigureShape(AttentionCase &attention, const SweepCase &c) {
  const DtypeSet &dtypes = kDtypeSets[c.dtypes];
  const Lengths &n = kLengths[c.lengths];
  attention.batch(c.batch)
      .q_len(n.q_len)
      .kv_len(n.kv_len)
      .heads(kGqas[c.gqa].q_heads, kGqas[c.gqa].kv_heads)
      .head_dim(kHeadDims[c.head_dim])
      .dtypes(dtypes.q, dtypes.k, dtypes.v, dtypes.out);
}

// A suite's cases, each named with its index in the suite, on every row.
struct IndexedCase {
  SweepCase sweep;
  size_t index;
};
std::vector<KernelParam<IndexedCase>>
OnEveryKernel(const std::vector<SweepCase> &cases) {
  std::vector<IndexedCase> indexed;
  for (size_t n = 0; n < cases.size(); n++) indexed.push_back({cases[n], n});
  return ForEveryKernel<IndexedCase>(
      indexed,
      TakesConfigured<IndexedCase>([](AttentionCase &a, const IndexedCase &c) {
        ConfigureShape(a, c.sweep);
      }));
}
const auto kName = KernelParamName<IndexedCase>(
    [](const IndexedCase &c) { return CaseName(c.sweep, c.index); });

using AttentionSweep = KernelSuite<IndexedCase>;

TEST_P(AttentionSweep, MatchesOracle) {
  const SweepCase &c = test_case().sweep;
  const DtypeSet &dtypes = kDtypeSets[c.dtypes];
  const unsigned mask = kMaskKinds[c.mask];
  const Lengths &n = kLengths[c.lengths];
  const int64_t S = n.kv_len;
  Rng rng(c.seed * 7919 + 1);

  AttentionCase attention;
  attention.batch(c.batch)
      .q_len(n.q_len)
      .kv_len(S)
      .heads(kGqas[c.gqa].q_heads, kGqas[c.gqa].kv_heads)
      .head_dim(kHeadDims[c.head_dim])
      .dtypes(dtypes.q, dtypes.k, dtypes.v, dtypes.out)
      .layout(kLayouts[c.layout])
      .magnitude(c.large ? Magnitude::kLarge : Magnitude::kSmall)
      .with_lse(c.lse)
      .seed(c.seed);
  if (c.kv_lengths) {
    // Batch 0 uses every row; the others fewer, sometimes none.
    std::vector<int64_t> lengths(static_cast<size_t>(c.batch), S);
    for (size_t b = 1; b < lengths.size(); b++) lengths[b] = rng.Below(S + 1);
    attention.kv_lengths(lengths);
  }
  if (mask & kCausal) attention.causal();
  if (mask & kWindow) {
    const int64_t windows[][2] = {{S / 3, 4}, {0, 0},         {7, -1},
                                  {-1, 2},    {S + 3, S + 3}, {1, 64}};
    const auto &w = windows[rng.Below(6)];
    attention.window(w[0], w[1]);
  }
  if (mask & kTree) {
    const int64_t keys[] = {5, 70, S}; // one word, two words, every key
    attention.tree(keys[rng.Below(3)], 0.7, rng.Chance(0.5));
  }
  if (mask & kAdditive)
    attention.additive(static_cast<AdditivePattern>(rng.Below(5)), 0.1);
  if (mask & kSoftcap) attention.softcap(c.large ? 30.0f : 0.5f);
  if (rng.Chance(0.15)) attention.scale(rng.Chance(0.5) ? 0.3f : -0.2f);
  Check(attention);
}

INSTANTIATE_TEST_SUITE_P(DtypeByMask, AttentionSweep,
                         testing::ValuesIn(OnEveryKernel(DtypeByMask())),
                         kName);
INSTANTIATE_TEST_SUITE_P(HeadDimByLayout, AttentionSweep,
                         testing::ValuesIn(OnEveryKernel(HeadDimByLayout())),
                         kName);
INSTANTIATE_TEST_SUITE_P(GqaByLengths, AttentionSweep,
                         testing::ValuesIn(OnEveryKernel(GqaByLengths())),
                         kName);
INSTANTIATE_TEST_SUITE_P(MaskByLengths, AttentionSweep,
                         testing::ValuesIn(OnEveryKernel(MaskByLengths())),
                         kName);
INSTANTIATE_TEST_SUITE_P(RandomMix, AttentionSweep,
                         testing::ValuesIn(OnEveryKernel(RandomMix())), kName);

} // namespace
} // namespace fctest
