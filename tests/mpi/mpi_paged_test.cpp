// flashcpu_mpi_attention_paged: each rank's keys in pages of its own pool,
// in shuffled order, NHD or HND. The result must have the bytes of the
// contiguous call (flashcpu_mpi_attention on a communicator of one),
// whatever the page size and the number of ranks, and pass the oracle;
// chunks that are not whole pages and missing block tables are refused on
// every rank.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "sharded_case.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, BF16 = FLASHCPU_DTYPE_BF16;

// A rank's keys in pages: pool [pages, page_size, Hkv, D] (NHD) or
// [pages, Hkv, page_size, D] (HND), pages of each request in shuffled
// places, and the block table [B][stride].
struct PagedShard {
  Shard shard;
  std::vector<unsigned char> k_pool, v_pool;
  flashcpu_paged_kv kv{};
  std::vector<int32_t> table;
  int64_t stride = 0;
};

void MakePagedShard(AttentionCase &c, Sharding sharding, int64_t chunk_keys,
                    int64_t page_size, bool hnd, int rank, int ranks,
                    PagedShard *p) {
  MakeShard(c, sharding, chunk_keys, rank, ranks, &p->shard);
  const int64_t batch = c.q().dims()[0];
  const int64_t heads = c.k().dims()[2], dim = c.k().dims()[3];
  const int64_t dv = c.v().dims()[3];
  int64_t pages = 0;
  for (int64_t b = 0; b < batch; b++) {
    const int64_t used = (p->shard.keys[b] + page_size - 1) / page_size;
    p->stride = std::max(p->stride, used);
    pages += used;
  }
  pages = std::max<int64_t>(pages, 1);
  std::vector<int32_t> places(static_cast<size_t>(pages));
  std::iota(places.begin(), places.end(), 0);
  std::shuffle(places.begin(), places.end(), std::mt19937(77 + rank));
  const size_t element = flashcpu_dtype_size(c.k().dtype());
  const flashcpu_dtype kv_dtype = c.k().dtype();
  p->kv = hnd ? flashcpu_paged_kv_hnd(nullptr, nullptr, kv_dtype, pages,
                                      page_size, heads, dim)
              : flashcpu_paged_kv_nhd(nullptr, nullptr, kv_dtype, pages,
                                      page_size, heads, dim);
  p->kv.v_head_dim = dv; // strides [page, slot, head] for v's width
  p->kv.v_strides[0] = page_size * heads * dv;
  p->kv.v_strides[1] = hnd ? dv : heads * dv;
  p->kv.v_strides[2] = hnd ? page_size * dv : dv;
  p->k_pool.assign(static_cast<size_t>(pages * page_size * heads * dim) *
                       element,
                   0xff); // NaN in every float dtype
  p->v_pool.assign(
      static_cast<size_t>(pages * page_size * heads * dv) * element, 0xff);
  p->kv.k = p->k_pool.data();
  p->kv.v = p->v_pool.data();
  p->table.assign(static_cast<size_t>(std::max<int64_t>(batch * p->stride, 1)),
                  -1);
  size_t next = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t s = 0; s < p->shard.keys[b]; s++) {
      if (s % page_size == 0)
        p->table[static_cast<size_t>(b * p->stride + s / page_size)] =
            places[next++];
      const int64_t page =
          p->table[static_cast<size_t>(b * p->stride + s / page_size)];
      for (int t = 0; t < 2; t++) {
        const TestTensor &rows = t ? p->shard.v : p->shard.k;
        const int64_t *strides = t ? p->kv.v_strides : p->kv.k_strides;
        unsigned char *pool = t ? p->v_pool.data() : p->k_pool.data();
        const int64_t width = t ? dv : dim;
        for (int64_t h = 0; h < heads; h++) {
          // Copy the stored element bytes of row s, head h.
          const flashcpu_tensor view = rows.View();
          const unsigned char *from =
              static_cast<const unsigned char *>(view.data) +
              (b * view.strides[0] + s * view.strides[1] +
               h * view.strides[2]) *
                  static_cast<int64_t>(element);
          unsigned char *to =
              pool + (page * strides[0] + (s % page_size) * strides[1] +
                      h * strides[2]) *
                         static_cast<int64_t>(element);
          std::copy(from, from + width * static_cast<int64_t>(element), to);
        }
      }
    }
}

flashcpu_status RunPaged(AttentionCase &c, MPI_Comm comm, Sharding sharding,
                         int64_t chunk_keys, int64_t page_size, bool hnd,
                         flashcpu_context *ctx, PagedShard *p) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  MakePagedShard(c, sharding, chunk_keys, page_size, hnd, rank, ranks, p);
  c.out_for_checker_tests().Poison();
  const flashcpu_tensor q = c.q().View(),
                        out = c.out_for_checker_tests().View();
  flashcpu_mpi_options options;
  flashcpu_mpi_options_init(&options);
  options.chunk_keys = chunk_keys;
  return flashcpu_mpi_attention_paged(
      ctx, comm, &q, &p->kv, p->table.data(), p->stride, &out,
      &c.lse_storage_for_checker_tests(kLseGuard), &p->shard.params, &options);
}

struct PagedCase {
  const char *name;
  int64_t chunk_keys, page_size;
  bool hnd;
  std::function<void(AttentionCase &)> setup;
};

const PagedCase kPagedCases[] = {
    {"decode_bf16_pages_of_16", 128, 16, false,
     [](AttentionCase &c) {
       c.batch(2).q_len(1).kv_len(600).kv_lengths({600, 95}).heads(8, 2);
       c.head_dim(64).dtypes(BF16, BF16, F32).causal();
     }},
    {"verify_tree_hnd_pages_of_32", 64, 32, true,
     [](AttentionCase &c) {
       c.batch(2).q_len(4).kv_len(500).kv_lengths({500, 333}).heads(4, 2);
       c.head_dim(32).causal().tree(20);
     }},
    {"window_alibi_sinks_pages_of_one", 48, 1, false,
     [](AttentionCase &c) {
       c.batch(1).q_len(3).kv_len(400).heads(4, 4).head_dim(16);
       c.causal().window(120, 0).alibi().sinks();
     }},
    {"additive_pages_of_8", 64, 8, true,
     [](AttentionCase &c) {
       c.batch(2).q_len(2).kv_len(200).kv_lengths({200, 131}).heads(2, 1);
       c.head_dim(40).additive();
     }},
};

using Param = std::tuple<PagedCase, Sharding>;

class ShardedPaged : public testing::TestWithParam<Param> {};

TEST_P(ShardedPaged, BytesOfTheContiguousCall) {
  const PagedCase &m = std::get<0>(GetParam());
  Context ctx(KernelOptions(FLASHCPU_ISA_AUTO, nullptr, 1));
  AttentionCase c;
  c.seed(41);
  m.setup(c);
  c.Build();
  EXPECT_EQ(c.Run(ctx), FLASHCPU_OK); // the oracle check's snapshots
  EXPECT_EQ(
      RunSharded(c, MPI_COMM_SELF, Sharding::kBalanced, m.chunk_keys, -1, ctx),
      FLASHCPU_OK)
      << flashcpu_mpi_last_error();
  const std::vector<uint64_t> contiguous = ResultBits(c);
  PagedShard paged;
  EXPECT_EQ(RunPaged(c, MPI_COMM_WORLD, std::get<1>(GetParam()), m.chunk_keys,
                     m.page_size, m.hnd, ctx, &paged),
            FLASHCPU_OK)
      << flashcpu_mpi_last_error();
  EXPECT_TRUE(c.CheckAgainstOracle());
  EXPECT_EQ(ResultBits(c), contiguous);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ShardedPaged,
    testing::Combine(testing::ValuesIn(kPagedCases),
                     testing::Values(Sharding::kBalanced,
                                     Sharding::kFirstEmpty)),
    [](const testing::TestParamInfo<Param> &param_info) {
      return std::string(std::get<0>(param_info.param).name) + "__" +
             ShardingName(std::get<1>(param_info.param));
    });

TEST(ShardedPagedErrors, ChunksOfPartPagesAndMissingTables) {
  Context ctx(KernelOptions(FLASHCPU_ISA_AUTO, nullptr, 1));
  AttentionCase c;
  c.seed(3).batch(1).q_len(1).kv_len(300).heads(2, 1).head_dim(16).causal();
  c.Build();
  PagedShard paged;
  EXPECT_EQ(RunPaged(c, MPI_COMM_WORLD, Sharding::kBalanced, 64, 48, false, ctx,
                     &paged),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpu_mpi_last_error())
                .find("chunk_keys 64 is not a multiple of the page size 48"),
            std::string::npos)
      << flashcpu_mpi_last_error();

  // Rank 0 loses its block table (it holds keys under kBalanced).
  MakePagedShard(c, Sharding::kBalanced, 64, 16, false, WorldRank(),
                 WorldSize(), &paged);
  const flashcpu_tensor q = c.q().View(),
                        out = c.out_for_checker_tests().View();
  flashcpu_mpi_options options;
  flashcpu_mpi_options_init(&options);
  options.chunk_keys = 64;
  const flashcpu_status status = flashcpu_mpi_attention_paged(
      ctx, MPI_COMM_WORLD, &q, &paged.kv,
      WorldRank() == 0 ? nullptr : paged.table.data(), paged.stride, &out,
      nullptr, &paged.shard.params, &options);
  EXPECT_EQ(status, FLASHCPU_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(flashcpu_mpi_last_error())
                .find("rank 0: flashcpu_mpi_attention_paged: block_table is "
                      "NULL but request 0 has keys"),
            std::string::npos)
      << flashcpu_mpi_last_error();
  for (int other : AllRanks(static_cast<int>(status)))
    EXPECT_EQ(other, static_cast<int>(status));
}

} // namespace
} // namespace fctest
