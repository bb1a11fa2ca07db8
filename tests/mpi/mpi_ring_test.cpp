// flashcpu_mpi_ring_attention: a prompt of 2N blocks, rank r holding
// blocks r and 2N-1-r (zigzag). Every rank's rows, gathered, must pass the
// float64 oracle's check of the whole prompt; a rank's bytes must not
// depend on its thread count; bad input is an error on every rank.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "sharded_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F16 = FLASHCPU_DTYPE_F16, BF16 = FLASHCPU_DTYPE_BF16,
                         F32 = FLASHCPU_DTYPE_F32;

// Rank `rank`'s two blocks of a [B, S, H, D] tensor, as [B, 2Bs, H, D].
TestTensor Blocks(const TestTensor &whole, int64_t block, int rank, int ranks) {
  const auto &d = whole.dims();
  TestTensor part(whole.dtype(), {d[0], 2 * block, d[2], d[3]}, Layout::kBSHD,
                  2 * block);
  const int64_t first[2] = {rank * block, (2 * ranks - 1 - rank) * block};
  for (int64_t b = 0; b < d[0]; b++)
    for (int m = 0; m < 2; m++)
      for (int64_t s = 0; s < block; s++)
        for (int64_t h = 0; h < d[2]; h++)
          for (int64_t e = 0; e < d[3]; e++)
            part.Set(b, m * block + s, h, e, whole.Get(b, first[m] + s, h, e));
  return part;
}

// This rank's ring call for c (whose rows are 2 N block).
struct RingRun {
  TestTensor q, k, v, out;
  std::vector<float> lse;
  flashcpu_status status;
};

void RunRing(AttentionCase &c, int64_t block, flashcpu_context *ctx,
             RingRun *run, const flashcpu_attention_params *params = nullptr) {
  const int rank = WorldRank(), ranks = WorldSize();
  run->q = Blocks(c.q(), block, rank, ranks);
  run->k = Blocks(c.k(), block, rank, ranks);
  run->v = Blocks(c.v(), block, rank, ranks);
  const auto &d = c.out().dims();
  run->out = TestTensor(c.out().dtype(), {d[0], 2 * block, d[2], d[3]},
                        Layout::kBSHD, 2 * block);
  run->lse.assign(static_cast<size_t>(d[0] * d[2] * 2 * block), NAN);
  const flashcpu_tensor q = run->q.View(), k = run->k.View(), v = run->v.View(),
                        out = run->out.View();
  run->status = flashcpu_mpi_ring_attention(ctx, MPI_COMM_WORLD, &q, &k, &v,
                                            &out, run->lse.data(),
                                            params ? params : &c.params());
}

// Every rank's rows into c's out and lse storage, on every rank.
void Gather(AttentionCase &c, int64_t block, const RingRun &run) {
  const int ranks = WorldSize();
  const auto &d = c.out().dims();
  std::vector<double> mine;
  for (int64_t b = 0; b < d[0]; b++)
    for (int64_t s = 0; s < 2 * block; s++)
      for (int64_t h = 0; h < d[2]; h++)
        for (int64_t e = 0; e < d[3]; e++)
          mine.push_back(run.out.Get(b, s, h, e));
  std::vector<double> outs(mine.size() * static_cast<size_t>(ranks));
  std::vector<float> lses(run.lse.size() * static_cast<size_t>(ranks));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE,
                outs.data(), static_cast<int>(mine.size()), MPI_DOUBLE,
                MPI_COMM_WORLD);
  MPI_Allgather(run.lse.data(), static_cast<int>(run.lse.size()), MPI_FLOAT,
                lses.data(), static_cast<int>(run.lse.size()), MPI_FLOAT,
                MPI_COMM_WORLD);
  c.out_for_checker_tests().Poison();
  float *lse = &c.lse_storage_for_checker_tests(kLseGuard);
  for (int r = 0; r < ranks; r++) {
    const int64_t first[2] = {r * block, (2 * ranks - 1 - r) * block};
    size_t at = mine.size() * static_cast<size_t>(r);
    for (int64_t b = 0; b < d[0]; b++)
      for (int64_t s = 0; s < 2 * block; s++)
        for (int64_t h = 0; h < d[2]; h++)
          for (int64_t e = 0; e < d[3]; e++)
            c.out_for_checker_tests().Set(b, first[s / block] + s % block, h, e,
                                          outs[at++]);
    const float *from = lses.data() + run.lse.size() * static_cast<size_t>(r);
    for (int64_t bh = 0; bh < d[0] * d[2]; bh++)
      for (int64_t s = 0; s < 2 * block; s++)
        lse[bh * d[1] + first[s / block] + s % block] =
            from[bh * 2 * block + s];
  }
}

struct RingCase {
  const char *name;
  int64_t block;
  std::function<void(AttentionCase &)> setup;
};

const RingCase kRingCases[] = {
    {"causal_bf16_gqa", 24,
     [](AttentionCase &c) {
       c.heads(8, 2).head_dim(64).dtypes(BF16, BF16, F32).causal();
     }},
    {"causal_window_alibi_softcap_sinks", 16,
     [](AttentionCase &c) {
       c.heads(4, 4).head_dim(32).causal().window(40, 0).alibi(true);
       c.softcap(20.0f).sinks();
     }},
    {"not_causal_f16_bf16_out", 20,
     [](AttentionCase &c) {
       c.heads(4, 1).head_dim(48).dtypes(F16, F16, BF16);
     }},
    {"causal_large_scores", 33,
     [](AttentionCase &c) {
       c.heads(2, 2).head_dim(64).causal().magnitude(Magnitude::kLarge);
     }},
};

class Ring : public testing::TestWithParam<RingCase> {};

TEST_P(Ring, MatchesTheOracleAndThreadCountsChangeNoByte) {
  const RingCase &m = GetParam();
  const int64_t prompt = 2 * WorldSize() * m.block;
  AttentionCase c;
  c.seed(19).batch(2).q_len(prompt).kv_len(prompt);
  m.setup(c);
  c.Build();
  Context one(KernelOptions(FLASHCPU_ISA_AUTO, nullptr, 1));
  EXPECT_EQ(c.Run(one), FLASHCPU_OK); // the oracle check's snapshots
  RingRun run;
  RunRing(c, m.block, one, &run);
  EXPECT_EQ(run.status, FLASHCPU_OK) << flashcpu_mpi_last_error();
  Gather(c, m.block, run);
  EXPECT_TRUE(c.CheckAgainstOracle()) << WorldSize() << " ranks";

  Context three(KernelOptions(FLASHCPU_ISA_AUTO, nullptr, 3));
  RingRun again;
  RunRing(c, m.block, three, &again);
  EXPECT_EQ(again.status, FLASHCPU_OK) << flashcpu_mpi_last_error();
  EXPECT_EQ(ElementBits(again.out), ElementBits(run.out)) << "3 threads";
  EXPECT_EQ(std::memcmp(again.lse.data(), run.lse.data(),
                        run.lse.size() * sizeof(float)),
            0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Ring, testing::ValuesIn(kRingCases),
    [](const testing::TestParamInfo<RingCase> &param_info) {
      return std::string(param_info.param.name);
    });

TEST(RingErrors, BlocksOfDifferentSizesAndMasksItCannotTake) {
  Context ctx(KernelOptions(FLASHCPU_ISA_AUTO, nullptr, 1));
  AttentionCase c;
  const int64_t block = 8, prompt = 2 * WorldSize() * block;
  c.seed(4).batch(1).q_len(prompt).kv_len(prompt).heads(2, 2).head_dim(16);
  c.causal().Build();
  RingRun run;
  RunRing(c, block, ctx, &run);
  EXPECT_EQ(run.status, FLASHCPU_OK) << flashcpu_mpi_last_error();

  if (WorldSize() > 1) { // the last rank's blocks are one row shorter
    RingRun shorter;
    shorter.q = Blocks(c.q(), block, WorldRank(), WorldSize());
    shorter.k = Blocks(c.k(), block, WorldRank(), WorldSize());
    shorter.v = Blocks(c.v(), block, WorldRank(), WorldSize());
    shorter.out =
        TestTensor(F32, {1, 2 * block, 2, 16}, Layout::kBSHD, 2 * block);
    const std::vector<unsigned char> before = shorter.out.bytes();
    flashcpu_tensor q = shorter.q.View(), k = shorter.k.View(),
                    v = shorter.v.View(), out = shorter.out.View();
    if (WorldRank() == WorldSize() - 1)
      for (flashcpu_tensor *t : {&q, &k, &v, &out}) t->dims[1] -= 2;
    const flashcpu_status status = flashcpu_mpi_ring_attention(
        ctx, MPI_COMM_WORLD, &q, &k, &v, &out, nullptr, &c.params());
    EXPECT_EQ(status, FLASHCPU_ERROR_SHAPE_MISMATCH);
    EXPECT_NE(std::string(flashcpu_mpi_last_error())
                  .find("disagree on the block (half of q's rows)"),
              std::string::npos)
        << flashcpu_mpi_last_error();
    EXPECT_EQ(shorter.out.bytes(), before);
    for (int other : AllRanks(static_cast<int>(status)))
      EXPECT_EQ(other, static_cast<int>(status));
  }

  flashcpu_attention_params params = c.params();
  const int64_t lengths[1] = {prompt};
  params.kv_lengths = lengths;
  RingRun refused;
  RunRing(c, block, ctx, &refused, &params);
  EXPECT_EQ(refused.status, FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_mpi_last_error()).find("are not taken"),
            std::string::npos)
      << flashcpu_mpi_last_error();
  bool untouched = true; // out starts as NaN, and stays so
  for (int64_t s = 0; s < 2 * block; s++)
    for (int64_t h = 0; h < 2; h++)
      for (int64_t e = 0; e < 16; e++)
        untouched = untouched && std::isnan(refused.out.Get(0, s, h, e));
  EXPECT_TRUE(untouched);
}

} // namespace
} // namespace fctest
