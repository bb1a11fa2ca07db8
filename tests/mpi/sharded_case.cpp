#include "sharded_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fctest {

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int WorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::vector<int> AllRanks(int x) {
  std::vector<int> all(static_cast<size_t>(WorldSize()));
  MPI_Allgather(&x, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return all;
}

const char *ShardingName(Sharding sharding) {
  switch (sharding) {
  case Sharding::kBalanced:
    return "balanced";
  case Sharding::kLastHoldsAll:
    return "last_holds_all";
  case Sharding::kFirstEmpty:
    return "first_empty";
  case Sharding::kGrowing:
    return "growing";
  }
  return "?";
}

void RangeOf(Sharding sharding, int64_t total, int64_t chunk_keys, int rank,
             int ranks, int64_t *begin, int64_t *keys) {
  const int64_t chunks = (total + chunk_keys - 1) / chunk_keys;
  int64_t first = 0, count = 0; // in chunks
  switch (sharding) {
  case Sharding::kBalanced:
    EXPECT_EQ(flashcpu_mpi_shard(total, chunk_keys, rank, ranks, begin, keys),
              FLASHCPU_OK);
    return;
  case Sharding::kLastHoldsAll:
    if (rank == ranks - 1) count = chunks;
    break;
  case Sharding::kFirstEmpty:
    if (ranks == 1) {
      count = chunks;
    } else if (rank > 0) {
      EXPECT_EQ(flashcpu_mpi_shard(total, chunk_keys, rank - 1, ranks - 1,
                                   begin, keys),
                FLASHCPU_OK);
      return;
    }
    break;
  case Sharding::kGrowing: {
    // Rank r's share ends at chunks * (1 + ... + (r + 1)) / (1 + ... + n).
    const int64_t weights = static_cast<int64_t>(ranks) * (ranks + 1) / 2;
    const int64_t before = static_cast<int64_t>(rank) * (rank + 1) / 2;
    const int64_t upto = before + rank + 1;
    first = chunks * before / weights;
    count = chunks * upto / weights - first;
    break;
  }
  }
  *begin = std::min(first * chunk_keys, total);
  *keys = std::min((first + count) * chunk_keys, total) - *begin;
}

void MakeShard(AttentionCase &c, Sharding sharding, int64_t chunk_keys,
               int rank, int ranks, Shard *shard) {
  const auto &dims = c.k().dims();
  const int64_t batch = dims[0];
  shard->begin.assign(static_cast<size_t>(batch), 0);
  shard->keys.assign(static_cast<size_t>(batch), 0);
  int64_t capacity = 0;
  for (int64_t b = 0; b < batch; b++) {
    RangeOf(sharding, c.kv_length_of(b), chunk_keys, rank, ranks,
            &shard->begin[b], &shard->keys[b]);
    capacity = std::max(capacity, shard->keys[b]);
  }
  // One spare row past the longest, poisoned (TestTensor starts as NaN).
  const int64_t rows = capacity + 1;
  const TestTensor *whole[2] = {&c.k(), &c.v()};
  TestTensor *part[2] = {&shard->k, &shard->v};
  for (int t = 0; t < 2; t++) {
    const auto &d = whole[t]->dims();
    *part[t] = TestTensor(whole[t]->dtype(), {batch, rows, d[2], d[3]},
                          Layout::kBSHD, rows);
    for (int64_t b = 0; b < batch; b++)
      for (int64_t s = 0; s < shard->keys[b]; s++)
        for (int64_t h = 0; h < d[2]; h++)
          for (int64_t e = 0; e < d[3]; e++)
            part[t]->Set(b, s, h, e,
                         whole[t]->Get(b, shard->begin[b] + s, h, e));
  }
  shard->params = c.params();
  shard->params.kv_lengths = shard->keys.data();
  shard->params.additive_mask = nullptr;
  if (const flashcpu_additive_mask *mask = c.params().additive_mask) {
    const auto &q = c.q().dims();
    const int64_t heads = q[2], q_rows = q[1];
    shard->additive.assign(static_cast<size_t>(batch * heads * q_rows * rows),
                           NAN);
    for (int64_t b = 0; b < batch; b++)
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < q_rows; i++)
          for (int64_t j = 0; j < shard->keys[b]; j++)
            shard->additive[static_cast<size_t>(
                ((b * heads + h) * q_rows + i) * rows + j)] =
                mask->data[b * mask->strides[0] + h * mask->strides[1] +
                           i * mask->strides[2] +
                           (shard->begin[b] + j) * mask->strides[3]];
    shard->additive_mask.data = shard->additive.data();
    shard->additive_mask.strides[0] = heads * q_rows * rows;
    shard->additive_mask.strides[1] = q_rows * rows;
    shard->additive_mask.strides[2] = rows;
    shard->additive_mask.strides[3] = 1;
    shard->params.additive_mask = &shard->additive_mask;
  }
}

flashcpu_status RunSharded(AttentionCase &c, MPI_Comm comm, Sharding sharding,
                           int64_t chunk_keys, int root,
                           flashcpu_context *ctx) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  Shard shard;
  MakeShard(c, sharding, chunk_keys, rank, ranks, &shard);
  c.out_for_checker_tests().Poison();
  float *lse = &c.lse_storage_for_checker_tests(kLseGuard);
  const int64_t lse_count = c.q().dims()[0] * c.q().dims()[1] * c.q().dims()[2];
  std::fill(lse, lse + lse_count, NAN);
  const bool receives = root < 0 || root == rank;
  const flashcpu_tensor q = c.q().View(), k = shard.k.View(),
                        v = shard.v.View(),
                        out = c.out_for_checker_tests().View();
  flashcpu_mpi_options options;
  flashcpu_mpi_options_init(&options);
  options.chunk_keys = chunk_keys;
  options.root = root;
  return flashcpu_mpi_attention(
      ctx, comm, &q, &k, &v, receives ? &out : nullptr,
      receives ? lse : nullptr, &shard.params, &options);
}

std::vector<uint64_t> ResultBits(const AttentionCase &c) {
  std::vector<uint64_t> bits = ElementBits(c.out());
  const auto &dims = c.out().dims();
  for (int64_t b = 0; b < dims[0]; b++)
    for (int64_t h = 0; h < dims[2]; h++)
      for (int64_t i = 0; i < dims[1]; i++) {
        const float x = c.lse_at(b, h, i);
        uint32_t word;
        std::memcpy(&word, &x, sizeof word);
        bits.push_back(word);
      }
  return bits;
}

namespace {

// One chunk's state by the header's definition.
struct ChunkState {
  std::vector<float> out, lse;
};

// Sink values as floats (from their storage dtype, widened exactly).
float SinkOf(const flashcpu_attention_params &p, int64_t h) {
  if (p.sinks_dtype == FLASHCPU_DTYPE_F32)
    return static_cast<const float *>(p.sinks)[h];
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char *>(p.sinks) + 2 * h, 2);
  if (p.sinks_dtype == FLASHCPU_DTYPE_BF16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &wide, sizeof x);
    return x;
  }
  const int exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                           : exponent == 31
                               ? (mantissa ? NAN : INFINITY)
                               : std::ldexp(mantissa + 1024, exponent - 25);
  return static_cast<float>((bits & 0x8000) ? -magnitude : magnitude);
}

} // namespace

flashcpu_status ChunkedDefinition(AttentionCase &c, int64_t chunk_keys,
                                  flashcpu_context *ctx) {
  const flashcpu_attention_params &given = c.params();
  const auto &qd = c.q().dims();
  const int64_t batch = qd[0], rows = qd[1], heads = qd[2];
  const int64_t dv = c.v().dims()[3];
  const int64_t out_floats = rows * heads * dv, lse_floats = heads * rows;
  c.out_for_checker_tests().Poison();
  for (int64_t b = 0; b < batch; b++) {
    const int64_t total = c.kv_length_of(b);
    std::vector<ChunkState> states;
    if (given.sinks) {
      ChunkState sink{std::vector<float>(out_floats, 0.0f),
                      std::vector<float>(lse_floats)};
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < rows; i++)
          sink.lse[h * rows + i] = SinkOf(given, h);
      states.push_back(sink);
    }
    flashcpu_tensor q = c.q().View();
    q.data = static_cast<char *>(q.data) +
             b * q.strides[0] * flashcpu_dtype_size(q.dtype);
    q.dims[0] = 1;
    for (int64_t begin = 0; begin < total; begin += chunk_keys) {
      const int64_t end = std::min(begin + chunk_keys, total);
      flashcpu_tensor k = c.k().View(), v = c.v().View();
      for (flashcpu_tensor *t : {&k, &v}) {
        t->data = static_cast<char *>(t->data) +
                  (b * t->strides[0] + begin * t->strides[1]) *
                      flashcpu_dtype_size(t->dtype);
        t->dims[0] = 1;
        t->dims[1] = end - begin;
      }
      flashcpu_attention_params p = given;
      const int64_t offset = total - end;
      p.kv_lengths = nullptr;
      p.sinks = nullptr;
      p.query_offsets = &offset;
      if (p.alibi_slopes && p.alibi_batch_stride)
        p.alibi_slopes += b * p.alibi_batch_stride;
      flashcpu_additive_mask additive;
      if (given.additive_mask) {
        additive = *given.additive_mask;
        additive.data += b * additive.strides[0] + begin * additive.strides[3];
        p.additive_mask = &additive;
      }
      // The tree mask's keys within the chunk, bit by bit.
      flashcpu_tree_mask tree{};
      std::vector<uint64_t> bits;
      p.tree_mask = nullptr;
      if (const flashcpu_tree_mask *whole = given.tree_mask) {
        const int64_t tree_begin = total - whole->num_keys;
        const int64_t first = std::max(begin, tree_begin);
        if (end > first) {
          const int64_t keys = end - first, words = (keys + 63) / 64;
          bits.assign(static_cast<size_t>(rows * words), 0);
          for (int64_t i = 0; i < rows; i++)
            for (int64_t t = 0; t < keys; t++) {
              const int64_t bit = first - tree_begin + t;
              const uint64_t word =
                  whole->bits[b * whole->batch_stride + i * whole->row_stride +
                              bit / 64];
              if ((word >> (bit % 64)) & 1)
                bits[i * words + t / 64] |= uint64_t{1} << (t % 64);
            }
          tree = {bits.data(), rows, keys, words, 0};
          p.tree_mask = &tree;
        }
      }
      ChunkState state{std::vector<float>(out_floats),
                       std::vector<float>(lse_floats)};
      const flashcpu_tensor out = flashcpu_tensor_bshd(
          state.out.data(), FLASHCPU_DTYPE_F32, 1, rows, heads, dv);
      const flashcpu_status status =
          flashcpu_attention(ctx, &q, &k, &v, &out, state.lse.data(), &p);
      if (status != FLASHCPU_OK) return status;
      states.push_back(std::move(state));
    }
    if (states.empty())
      states.push_back({std::vector<float>(out_floats, 0.0f),
                        std::vector<float>(lse_floats, -INFINITY)});
    std::vector<flashcpu_tensor> views;
    std::vector<const float *> lses;
    for (ChunkState &s : states) {
      views.push_back(flashcpu_tensor_bshd(s.out.data(), FLASHCPU_DTYPE_F32, 1,
                                           rows, heads, dv));
      lses.push_back(s.lse.data());
    }
    flashcpu_tensor out = c.out_for_checker_tests().View();
    out.data = static_cast<char *>(out.data) +
               b * out.strides[0] * flashcpu_dtype_size(out.dtype);
    out.dims[0] = 1;
    float *lse = &c.lse_storage_for_checker_tests(kLseGuard) + b * lse_floats;
    const flashcpu_status status =
        flashcpu_merge_states(ctx, static_cast<int64_t>(views.size()),
                              views.data(), lses.data(), &out, lse);
    if (status != FLASHCPU_OK) return status;
  }
  return FLASHCPU_OK;
}

} // namespace fctest
