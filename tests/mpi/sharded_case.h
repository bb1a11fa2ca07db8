// What the MPI suites share: an AttentionCase (the whole problem, drawn
// identically on every rank from its seed) cut into the ranges a rank
// holds, the sharded call on a communicator, and the result's bytes.
//
// Every rank runs every test in the same order and makes the same
// collective calls whatever its own checks found: an ASSERT that returned
// early on one rank only would leave the others waiting (the watchdog of
// mpi_test_main.cpp turns such a hang into a failure).
#ifndef FLASHCPU_TESTS_MPI_SHARDED_CASE_H
#define FLASHCPU_TESTS_MPI_SHARDED_CASE_H

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention_case.h"
#include "flashcpu/flashcpu_mpi.h"
#include "test_tensor.h"

namespace fctest {

constexpr int64_t kLseGuard = 16; // floats before lse in AttentionCase

int WorldRank();
int WorldSize();

// How a request's chunks are spread over the ranks (always whole chunks,
// contiguous, in rank order).
enum class Sharding {
  kBalanced,     // flashcpu_mpi_shard
  kLastHoldsAll, // every rank but the last holds nothing
  kFirstEmpty,   // rank 0 holds nothing, the others balanced
  kGrowing,      // rank r holds about (r + 1) shares
};
const char *ShardingName(Sharding sharding);

// Positions [begin, begin + keys) of a request of `total` keys that rank
// `rank` of `ranks` holds under `sharding`.
void RangeOf(Sharding sharding, int64_t total, int64_t chunk_keys, int rank,
             int ranks, int64_t *begin, int64_t *keys);

// One rank's part of c: its K/V rows (padded with NaN past its lengths, so
// that a read past them shows), its kv lengths and additive-mask columns,
// and the params to pass (c's, with those swapped in).
struct Shard {
  std::vector<int64_t> begin, keys;
  TestTensor k, v;
  std::vector<float> additive;
  flashcpu_additive_mask additive_mask{};
  flashcpu_attention_params params{};
};
void MakeShard(AttentionCase &c, Sharding sharding, int64_t chunk_keys,
               int rank, int ranks, Shard *shard);

// flashcpu_mpi_attention on comm for c cut by `sharding`, writing into
// c's out and lse storage (poisoned first) on the ranks that receive.
flashcpu_status RunSharded(AttentionCase &c, MPI_Comm comm, Sharding sharding,
                           int64_t chunk_keys, int root, flashcpu_context *ctx);

// A result's bytes: out's elements widened exactly, then lse's bits.
std::vector<uint64_t> ResultBits(const AttentionCase &c);

// The result as the header defines it, computed in this process from c's
// whole K/V with flashcpu_attention per chunk and flashcpu_merge_states
// (written independently of the library's component), into c's out.
flashcpu_status ChunkedDefinition(AttentionCase &c, int64_t chunk_keys,
                                  flashcpu_context *ctx);

// Every rank's value of x, gathered on every rank.
std::vector<int> AllRanks(int x);

} // namespace fctest

#endif
