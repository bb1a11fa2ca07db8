// Attention output bytes must not depend on the thread count, the team
// shape or the topology. Each ISA has its own kernels (summing in its own
// vector order), so bytes are compared within one ISA cap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashcpu/flashcpu.h"
extern "C" {
#include "api/context_internal.h"
#include "dispatch/isa.h"
#include "dispatch/kernel_table.h"
}

namespace {

// A causal GQA problem with per-batch kv lengths, bf16 K/V, a window and a
// tree mask on the second variant: many tiles of uneven weight.
struct Problem {
  int64_t B = 2, L = 70, S = 200, Hq = 8, Hkv = 2, D = 40;
  std::vector<float> q;
  std::vector<uint16_t> k, v;
  std::vector<int64_t> kv_lengths{200, 131};
  std::vector<uint64_t> tree_bits;
  flashcpu_tree_mask tree{};

  Problem() {
    std::mt19937 random(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    q.resize(B * L * Hq * D);
    for (auto &x : q) x = uniform(random) * 2.0f;
    k.resize(B * S * Hkv * D);
    v.resize(B * S * Hkv * D);
    auto bf16 = [](float x) {
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      return static_cast<uint16_t>(bits >> 16);
    };
    for (auto &x : k) x = bf16(uniform(random));
    for (auto &x : v) x = bf16(uniform(random));
    tree_bits.resize(L);
    for (auto &word : tree_bits) word = random() | 1u;
    tree = {tree_bits.data(), L, 20, 1, 0};
  }

  std::vector<uint8_t> Run(flashcpu_context *ctx, bool window_and_tree) {
    std::vector<float> out(B * L * Hq * D, NAN);
    std::vector<float> lse(B * Hq * L, NAN);
    flashcpu_tensor tq =
        flashcpu_tensor_bshd(q.data(), FLASHCPU_DTYPE_F32, B, L, Hq, D);
    flashcpu_tensor tk =
        flashcpu_tensor_bhsd(k.data(), FLASHCPU_DTYPE_BF16, B, Hkv, S, D);
    flashcpu_tensor tv =
        flashcpu_tensor_bshd(v.data(), FLASHCPU_DTYPE_BF16, B, S, Hkv, D);
    flashcpu_tensor to =
        flashcpu_tensor_bshd(out.data(), FLASHCPU_DTYPE_F32, B, L, Hq, D);
    flashcpu_attention_params params;
    flashcpu_attention_params_init(&params);
    params.flags = FLASHCPU_FLAG_CAUSAL;
    params.kv_lengths = kv_lengths.data();
    if (window_and_tree) {
      params.window_left = 50;
      params.tree_mask = &tree;
    }
    EXPECT_EQ(flashcpu_attention(ctx, &tq, &tk, &tv, &to, lse.data(), &params),
              FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    std::vector<uint8_t> bytes(out.size() * 4 + lse.size() * 4);
    std::memcpy(bytes.data(), out.data(), out.size() * 4);
    std::memcpy(bytes.data() + out.size() * 4, lse.data(), lse.size() * 4);
    return bytes;
  }
};

struct Shape {
  int threads, max_team;
  flashcpu_team_level level;
  flashcpu_isa isa;
  const char *synthetic; // nullptr: this machine
};

std::string Describe(const Shape &s) {
  return std::to_string(s.threads) +
         " threads, team<=" + std::to_string(s.max_team) + ", level " +
         std::to_string(s.level) + ", isa " + flashcpu_isa_name(s.isa) +
         (s.synthetic ? std::string(", ") + s.synthetic : std::string());
}

class TeamDeterminism : public testing::TestWithParam<flashcpu_isa> {};

TEST_P(TeamDeterminism, SameBytesForEveryThreadCountAndTeamShape) {
  const flashcpu_isa isa = GetParam();
  if (!fc_isa_supported(fc_cpu_features_get(), isa))
    GTEST_SKIP() << flashcpu_isa_name(isa) << " not supported here";
  std::vector<Shape> shapes;
  for (int threads : {1, 2, 3, 7})
    for (int max_team : {1, 2, 0})
      for (flashcpu_team_level level : {FLASHCPU_TEAM_CORE, FLASHCPU_TEAM_L3})
        shapes.push_back({threads, max_team, level, isa, nullptr});
  // Many teams on a synthetic machine (threads run unpinned there).
  shapes.push_back(
      {16, 4, FLASHCPU_TEAM_L3, isa, "pack:2 numa:2 l3:1 core:8 pu:2"});

  Problem problem;
  for (bool window_and_tree : {false, true}) {
    std::vector<uint8_t> reference;
    for (const Shape &shape : shapes) {
      flashcpu_context_options options;
      flashcpu_context_options_init(&options);
      options.num_threads = shape.threads;
      options.max_team_size = shape.max_team;
      options.team_level = shape.level;
      options.max_isa = shape.isa;
      fc_topology_source source{shape.synthetic, nullptr, nullptr};
      flashcpu_context *ctx = nullptr;
      ASSERT_EQ(fc_context_create_on(&options,
                                     shape.synthetic ? &source : nullptr, &ctx),
                FLASHCPU_OK)
          << flashcpu_last_error(nullptr);
      std::vector<uint8_t> bytes = problem.Run(ctx, window_and_tree);
      flashcpu_context_destroy(ctx);
      if (reference.empty()) {
        reference = bytes;
        continue;
      }
      ASSERT_EQ(std::memcmp(bytes.data(), reference.data(), bytes.size()), 0)
          << Describe(shape) << (window_and_tree ? ", window+tree" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, TeamDeterminism,
                         testing::Values(FLASHCPU_ISA_SCALAR, FLASHCPU_ISA_AVX2,
                                         FLASHCPU_ISA_AVX512,
                                         FLASHCPU_ISA_NEON),
                         [](const testing::TestParamInfo<flashcpu_isa> &param) {
                           return std::string(flashcpu_isa_name(param.param));
                         });

} // namespace
