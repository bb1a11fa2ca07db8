// The prefill driver's choice of tile size (fc_prefill_plan_tiles): the
// kernel's own size where a problem has tiles enough for every team, a
// smaller one where that balances the teams better, never below the
// default, for ragged batches (a paged call's requests) as for the others.
#include <gtest/gtest.h>

#include <cstdint>

extern "C" {
#include "kernels/prefill/prefill_driver.h"
}

namespace {

// llama3-8b heads (32 query, 8 KV, head_dim 128), one sequence.
fc_problem Problem(int64_t q_len, int64_t kv_len) {
  fc_problem p{};
  p.batch = 1;
  p.q_len = q_len;
  p.kv_capacity = kv_len;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.group = 4;
  p.head_dim = p.v_head_dim = 128;
  p.causal = true;
  p.window_left = p.window_right = -1;
  return p;
}

// The AMX kernel's shape: 32 slots, 192-key blocks, tiles of 768 slots.
const fc_prefill_shape kShape = {32, 192, 32, 768};

TEST(PrefillTileSize, ManyTilesKeepTheKernelsSize) {
  const fc_problem p = Problem(4096, 4096);
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 16).slots_per_tile, 768);
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 1).slots_per_tile, 768);
}

TEST(PrefillTileSize, AChunkOnALongPrefixFillsSixteenTeams) {
  // 512 rows onto 4096 cached keys: 24 even tiles of 768 slots leave half
  // the teams idle for the second round; 48 of 384 give each team three.
  const fc_problem p = Problem(512, 4608);
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 16).slots_per_tile, 384);
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 2).slots_per_tile, 768);
}

TEST(PrefillTileSize, NeverBelowTheDefault) {
  const fc_problem p = Problem(64, 64);
  const fc_prefill_plan plan = fc_prefill_plan_tiles(&p, &kShape, 256);
  EXPECT_GE(plan.slots_per_tile, FC_PREFILL_TILE_SLOTS);
  EXPECT_EQ(plan.tile_count, 16); // 48-row tiles, two per kv head
}

TEST(PrefillTileSize, ARaggedChunkBalancesAsTheContiguousOne) {
  // The same chunk as one request of a paged call: its tiles laid out per
  // request, and the same choice.
  fc_problem p = Problem(512, 4608);
  const int64_t q_lens[1] = {512};
  p.q_lens = q_lens;
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 16).slots_per_tile, 384);
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 2).slots_per_tile, 768);
}

TEST(PrefillTileSize, RaggedRequestsWithTilesEnoughKeepTheKernelsSize) {
  // Four chunks of 1024 rows: 64 tiles of 768 slots, four per team.
  fc_problem p = Problem(1024, 4608);
  p.batch = 4;
  const int64_t q_lens[4] = {1024, 1024, 1024, 1024};
  p.q_lens = q_lens;
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 16).slots_per_tile, 768);
}

} // namespace
