// The prefill driver's choice of tile size (fc_prefill_plan_tiles): the
// kernel's own size where a problem has tiles enough for every team, a
// smaller one (any tile count per kv head) where that balances the teams
// better, never below the default, and the kernel's own for ragged batches (their tiles are laid
// out by the launch).
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
  // 512 rows onto 4096 cached keys: 24 tiles of 768 slots (192 rows) leave
  // half the teams idle for the second round, and 48 of 384 give half the
  // teams three full tiles against 2 2/3 of work; 32 tiles of 128 rows
  // give every team two.
  const fc_problem p = Problem(512, 4608);
  const fc_prefill_plan plan = fc_prefill_plan_tiles(&p, &kShape, 16);
  EXPECT_EQ(plan.slots_per_tile, 512);
  EXPECT_EQ(plan.rows_per_tile, 128);
  EXPECT_EQ(plan.tile_count, 32);
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 2).slots_per_tile, 768);
}

TEST(PrefillTileSize, TileCountsThatAreNotHalvings) {
  // 1024 rows at 16 teams: 128-row tiles, 64 of them, four per team (768
  // slots would make 48 tiles of unequal rows).
  const fc_problem p = Problem(1024, 5120);
  const fc_prefill_plan plan = fc_prefill_plan_tiles(&p, &kShape, 16);
  EXPECT_EQ(plan.rows_per_tile, 128);
  EXPECT_EQ(plan.tile_count % 16, 0);
  // 384 rows at 12 teams: 8 heads x 3 tiles of 128 rows, two per team.
  const fc_problem q = Problem(384, 4096);
  const fc_prefill_plan three = fc_prefill_plan_tiles(&q, &kShape, 12);
  EXPECT_EQ(three.rows_per_tile, 128);
  EXPECT_EQ(three.tile_count, 24);
}

TEST(PrefillTileSize, RowsFillWholeRegisterBlocks) {
  // Any choice's slots are whole 32-slot register blocks (8 rows of a
  // 4-head group), whatever the row count.
  for (int64_t rows : {100, 200, 333, 520, 700}) {
    const fc_problem p = Problem(rows, rows + 4096);
    for (int teams : {3, 7, 16, 24}) {
      const fc_prefill_plan plan = fc_prefill_plan_tiles(&p, &kShape, teams);
      if (plan.rows_per_tile < p.q_len) {
        EXPECT_EQ(plan.slots_per_tile % 32, 0) << rows << " rows, " << teams;
      }
      EXPECT_GE(plan.slots_per_tile, FC_PREFILL_TILE_SLOTS) << rows;
      EXPECT_LE(plan.slots_per_tile, 768) << rows;
    }
  }
}

TEST(PrefillTileSize, NeverBelowTheDefault) {
  const fc_problem p = Problem(64, 64);
  const fc_prefill_plan plan = fc_prefill_plan_tiles(&p, &kShape, 256);
  EXPECT_GE(plan.slots_per_tile, FC_PREFILL_TILE_SLOTS);
  EXPECT_EQ(plan.tile_count, 16);  // 48-row tiles, two per kv head
}

TEST(PrefillTileSize, RaggedBatchesKeepTheKernelsSize) {
  fc_problem p = Problem(512, 4608);
  const int64_t q_lens[1] = {512};
  p.q_lens = q_lens;
  EXPECT_EQ(fc_prefill_plan_tiles(&p, &kShape, 16).slots_per_tile, 768);
}

}  // namespace
