// flashcpu_mpi_attention on MPI_COMM_WORLD (run under mpirun with 1 to 4
// ranks): for each case and way of spreading the chunks over the ranks,
// the result must
//  - pass the float64 oracle's check of the whole sequence,
//  - have the bytes of the same call on a communicator of one (this
//    process, MPI_COMM_SELF, every key), so equal bytes for any rank count,
//  - have the bytes of the header's definition (flashcpu_attention per
//    chunk, flashcpu_merge_states in the fixed order) computed here.
// Also: only the root receives, thread counts change no byte, one chunk
// gives flashcpu_attention's own bytes, and flashcpu_mpi_shard.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "sharded_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, F16 = FLASHCPU_DTYPE_F16,
                         BF16 = FLASHCPU_DTYPE_BF16;

struct MpiCase {
  const char *name;
  int64_t chunk_keys;
  std::function<void(AttentionCase &)> setup;
};

const MpiCase kCases[] = {
    {"decode_gqa_bf16", 128,
     [](AttentionCase &c) {
       c.batch(2).q_len(1).kv_len(1000).kv_lengths({1000, 77}).heads(8, 2);
       c.head_dim(64).dtypes(BF16, BF16, F32).causal();
     }},
    {"verify_tree_across_chunks", 64,
     [](AttentionCase &c) {
       c.batch(2).q_len(5).kv_len(700).kv_lengths({700, 333}).heads(4, 2);
       c.head_dim(32).causal().tree(20);
     }},
    {"verify_window_alibi_softcap_sinks", 100,
     [](AttentionCase &c) {
       c.batch(2).q_len(3).kv_len(900).kv_lengths({900, 515}).heads(4, 4);
       c.head_dim(48).causal().window(150, 0).alibi(true).softcap(30.0f);
       c.sinks(BF16);
     }},
    {"additive_f16_not_causal_bf16_out", 64,
     [](AttentionCase &c) {
       c.batch(2).q_len(2).kv_len(260).kv_lengths({260, 190}).heads(2, 1);
       c.head_dim(40).dtypes(F16, F16, BF16).additive();
     }},
    {"empty_request_and_f16_sinks", 64,
     [](AttentionCase &c) {
       c.batch(2).q_len(1).kv_len(300).kv_lengths({0, 300}).heads(4, 2);
       c.head_dim(32).sinks(F16);
     }},
    {"one_chunk_short_sequence", 64,
     [](AttentionCase &c) {
       c.batch(1).q_len(4).kv_len(50).heads(2, 2).head_dim(16).causal();
     }},
    {"prefill_rows_large_scores", 32,
     [](AttentionCase &c) {
       c.batch(1).q_len(24).kv_len(300).heads(4, 2).head_dim(64).causal();
       c.magnitude(Magnitude::kLarge).dtypes(BF16, BF16, F32);
     }},
};

const Sharding kShardings[] = {Sharding::kBalanced, Sharding::kLastHoldsAll,
                               Sharding::kFirstEmpty, Sharding::kGrowing};

// A context of `threads` threads (ranks share the cores).
flashcpu_context_options Threads(int threads) {
  return KernelOptions(FLASHCPU_ISA_AUTO, nullptr, threads);
}

using Param = std::tuple<MpiCase, Sharding>;

class Sharded : public testing::TestWithParam<Param> {};

TEST_P(Sharded, MatchesTheOracleOneRankAndTheDefinition) {
  const MpiCase &m = std::get<0>(GetParam());
  const Sharding sharding = std::get<1>(GetParam());
  Context ctx(Threads(1));
  AttentionCase c;
  c.seed(31);
  m.setup(c);
  c.Build();
  // The whole problem once in one call: it records the input snapshots
  // the oracle check compares with.
  EXPECT_EQ(c.Run(ctx), FLASHCPU_OK);

  EXPECT_EQ(
      RunSharded(c, MPI_COMM_SELF, Sharding::kBalanced, m.chunk_keys, -1, ctx),
      FLASHCPU_OK)
      << flashcpu_mpi_last_error();
  EXPECT_TRUE(c.CheckAgainstOracle()) << "one rank";
  const std::vector<uint64_t> one_rank = ResultBits(c);

  EXPECT_EQ(ChunkedDefinition(c, m.chunk_keys, ctx), FLASHCPU_OK)
      << flashcpu_last_error(ctx);
  EXPECT_EQ(ResultBits(c), one_rank) << "the header's definition";

  EXPECT_EQ(RunSharded(c, MPI_COMM_WORLD, sharding, m.chunk_keys, -1, ctx),
            FLASHCPU_OK)
      << flashcpu_mpi_last_error();
  EXPECT_TRUE(c.CheckAgainstOracle()) << WorldSize() << " ranks";
  EXPECT_EQ(ResultBits(c), one_rank) << WorldSize() << " ranks";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Sharded,
    testing::Combine(testing::ValuesIn(kCases), testing::ValuesIn(kShardings)),
    [](const testing::TestParamInfo<Param> &param_info) {
      return std::string(std::get<0>(param_info.param).name) + "__" +
             ShardingName(std::get<1>(param_info.param));
    });

TEST(ShardedRoot, OnlyTheRootReceives) {
  Context ctx(Threads(1));
  AttentionCase c;
  c.seed(5).batch(2).q_len(2).kv_len(400).kv_lengths({400, 129});
  c.heads(4, 2).head_dim(32).causal().alibi();
  c.Build();
  EXPECT_EQ(c.Run(ctx), FLASHCPU_OK);
  EXPECT_EQ(RunSharded(c, MPI_COMM_SELF, Sharding::kBalanced, 64, -1, ctx),
            FLASHCPU_OK);
  const std::vector<uint64_t> one_rank = ResultBits(c);
  c.out_for_checker_tests().Poison();
  const std::vector<unsigned char> poisoned = c.out().bytes();
  const int root = WorldSize() - 1;
  EXPECT_EQ(RunSharded(c, MPI_COMM_WORLD, Sharding::kGrowing, 64, root, ctx),
            FLASHCPU_OK)
      << flashcpu_mpi_last_error();
  if (WorldRank() == root)
    EXPECT_EQ(ResultBits(c), one_rank);
  else
    EXPECT_EQ(c.out().bytes(), poisoned) << "a rank that does not receive";
}

TEST(ShardedThreads, ThreadCountsChangeNoByte) {
  AttentionCase c;
  c.seed(8).batch(1).q_len(4).kv_len(777).heads(8, 2).head_dim(64);
  c.causal().window(300, 0).dtypes(BF16, BF16, BF16).tree(6);
  c.Build();
  std::vector<uint64_t> first;
  for (int threads : {1, 2, 3}) {
    Context ctx(Threads(threads));
    EXPECT_EQ(RunSharded(c, MPI_COMM_WORLD, Sharding::kBalanced, 96, -1, ctx),
              FLASHCPU_OK)
        << flashcpu_mpi_last_error();
    if (first.empty())
      first = ResultBits(c);
    else
      EXPECT_EQ(ResultBits(c), first) << threads << " threads";
  }
}

// One request in one chunk, no sinks, f32 out: the merge of a single
// state is exact, so the bytes are flashcpu_attention's over the whole
// sequence.
TEST(ShardedOneChunk, BytesOfOneFlashcpuAttentionCall) {
  Context ctx(Threads(1));
  AttentionCase c;
  c.seed(12).batch(1).q_len(3).kv_len(200).heads(4, 2).head_dim(32);
  c.causal().window(120, 0).alibi().tree(4).dtypes(BF16, BF16, F32);
  c.Build();
  EXPECT_EQ(c.Run(ctx), FLASHCPU_OK);
  const std::vector<uint64_t> single = ResultBits(c);
  EXPECT_EQ(RunSharded(c, MPI_COMM_WORLD, Sharding::kBalanced, 256, -1, ctx),
            FLASHCPU_OK)
      << flashcpu_mpi_last_error();
  EXPECT_EQ(ResultBits(c), single);
}

TEST(MpiShard, BalancedWholeChunks) {
  int64_t begin = -1, keys = -1;
  // 10 chunks of 100 (the last 50 keys) over 4 ranks: 3, 3, 2, 2 chunks.
  const int64_t expected[4][2] = {{0, 300}, {300, 300}, {600, 200}, {800, 150}};
  for (int r = 0; r < 4; r++) {
    EXPECT_EQ(flashcpu_mpi_shard(950, 100, r, 4, &begin, &keys), FLASHCPU_OK);
    EXPECT_EQ(begin, expected[r][0]) << "rank " << r;
    EXPECT_EQ(keys, expected[r][1]) << "rank " << r;
  }
  // More ranks than chunks: the last ranks hold nothing, at the end.
  EXPECT_EQ(flashcpu_mpi_shard(150, 100, 3, 4, &begin, &keys), FLASHCPU_OK);
  EXPECT_EQ(begin, 150);
  EXPECT_EQ(keys, 0);
  EXPECT_EQ(flashcpu_mpi_shard(0, 0, 0, 1, &begin, &keys), FLASHCPU_OK);
  EXPECT_EQ(keys, 0);
  // chunk_keys 0: the default; 6 chunks (the last of 7 keys), 3 per rank.
  constexpr int64_t kChunk = FLASHCPU_MPI_DEFAULT_CHUNK_KEYS;
  EXPECT_EQ(flashcpu_mpi_shard(5 * kChunk + 7, 0, 1, 2, &begin, &keys),
            FLASHCPU_OK);
  EXPECT_EQ(begin, 3 * kChunk);
  EXPECT_EQ(keys, 2 * kChunk + 7);
  EXPECT_EQ(flashcpu_mpi_shard(10, 4, 2, 2, &begin, &keys),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_mpi_last_error()).find("rank 2 of 2"),
            std::string::npos)
      << flashcpu_mpi_last_error();
  EXPECT_EQ(flashcpu_mpi_shard(10, 4, 0, 1, nullptr, &keys),
            FLASHCPU_ERROR_NULL_POINTER);
}

} // namespace
} // namespace fctest
