// The decode kernels' prefetch sweep: the lines it hands out cover the rows
// of a key block, each once, in ascending address order where the layout
// allows it (rows listed per key: key by key), and nothing once done.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

extern "C" int64_t fctest_sweep_lines(const char *first_row, int64_t keys,
                                      int64_t heads, int64_t key_step,
                                      int64_t head_step, int64_t row_bytes,
                                      const char **lines, int64_t capacity);
extern "C" int64_t
fctest_sweep_lines_listed(const char *const *key_rows, int64_t keys,
                          int64_t heads, int64_t head_step, int64_t row_bytes,
                          const char **lines, int64_t capacity);

namespace {

constexpr int64_t kLine = 64;

struct Layout {
  int64_t keys, heads, key_step, head_step, row_bytes, offset;
};

// A buffer the sweep's addresses point into (it never reads them).
std::vector<char> &Arena() {
  static std::vector<char> arena(1 << 22);
  return arena;
}

const char *Base(int64_t offset) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(Arena().data());
  const uintptr_t aligned = (start + 4095) & ~uintptr_t{4095};
  return reinterpret_cast<const char *>(aligned) + offset;
}

std::vector<const char *> Lines(const Layout &l) {
  std::vector<const char *> lines(1 << 16);
  const int64_t count = fctest_sweep_lines(
      Base(l.offset), l.keys, l.heads, l.key_step, l.head_step, l.row_bytes,
      lines.data(), static_cast<int64_t>(lines.size()));
  EXPECT_LE(count, static_cast<int64_t>(lines.size()));
  lines.resize(static_cast<size_t>(count));
  return lines;
}

// Every line some row of the block touches.
std::set<const char *> RowLines(const Layout &l) {
  std::set<const char *> want;
  for (int64_t k = 0; k < l.keys; k++)
    for (int64_t h = 0; h < l.heads; h++) {
      const char *row = Base(l.offset) + k * l.key_step + h * l.head_step;
      const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
      const uintptr_t last =
          (reinterpret_cast<uintptr_t>(row) + l.row_bytes - 1) & ~uintptr_t{63};
      for (uintptr_t a = first; a <= last; a += kLine)
        want.insert(reinterpret_cast<const char *>(a));
    }
  return want;
}

void ExpectCoversAscending(const Layout &l) {
  const std::vector<const char *> lines = Lines(l);
  const std::set<const char *> want = RowLines(l);
  ASSERT_FALSE(lines.empty());
  for (size_t i = 1; i < lines.size(); i++)
    EXPECT_LT(lines[i - 1], lines[i]) << "line " << i;
  EXPECT_EQ(std::set<const char *>(lines.begin(), lines.end()), want);
  EXPECT_EQ(lines.size(), want.size());
}

TEST(PrefetchSweep, AdjacentHeadsMergeIntoOneAscendingRunPerKey) {
  // llama3-8b bf16 BSHD: 8 heads x 128 elements, 16 keys.
  ExpectCoversAscending({16, 8, 8 * 256, 256, 256, 0});
  // Heads 2..5 of 8: runs of 1 KiB, 2 KiB apart.
  ExpectCoversAscending({16, 4, 8 * 256, 256, 256, 2 * 256});
}

TEST(PrefetchSweep, HeadsWithGapsStayAscendingKeyMajor) {
  // Rows padded to 384 bytes: 256 bytes of data per head.
  ExpectCoversAscending({16, 4, 4 * 384, 384, 256, 0});
}

TEST(PrefetchSweep, HeadMajorLayoutWalksHeadByHead) {
  // BHSD: a head's keys are adjacent; heads 64 KiB apart.
  ExpectCoversAscending({16, 4, 256, 65536, 256, 0});
}

TEST(PrefetchSweep, RowsOffLineBoundariesCoverEveryTouchedLine) {
  // head_dim 80 bf16 (160 bytes), one head, keys 3 heads apart.
  ExpectCoversAscending({13, 1, 3 * 160, 160, 160, 32});
  // f32 rows of 100 bytes starting mid-line, 2 adjacent heads.
  ExpectCoversAscending({5, 2, 1000, 100, 100, 40});
}

TEST(PrefetchSweep, FewerKeysThanABlock) {
  ExpectCoversAscending({1, 8, 2048, 256, 256, 0});
  ExpectCoversAscending({3, 1, 2048, 256, 256, 0});
}

TEST(PrefetchSweep, RowsListedPerKeyAreWalkedKeyByKey) {
  // A paged cache: 16 keys of 8 adjacent heads, each key on its own page
  // in a shuffled order, so no two keys touch; the walk must follow the
  // listed rows, not the contiguous run the setup's key step implies.
  const int64_t keys = 16, heads = 8, row_bytes = 256;
  std::vector<const char *> rows;
  std::set<const char *> want;
  for (int64_t k = 0; k < keys; k++) {
    const char *row = Base(((k * 7) % keys) * 4096 + 64);
    rows.push_back(row);
    for (int64_t at = 0; at < heads * row_bytes; at += kLine)
      want.insert(row + at);
  }
  std::vector<const char *> lines(4096);
  const int64_t count = fctest_sweep_lines_listed(
      rows.data(), keys, heads, row_bytes, row_bytes, lines.data(),
      static_cast<int64_t>(lines.size()));
  lines.resize(static_cast<size_t>(count));
  EXPECT_EQ(std::set<const char *>(lines.begin(), lines.end()), want);
  ASSERT_EQ(lines.size(), want.size());
  for (int64_t k = 0; k < keys; k++) // key by key, each key's run ascending
    for (int64_t i = 0; i < heads * row_bytes / kLine; i++)
      EXPECT_EQ(lines[static_cast<size_t>(k * heads * row_bytes / kLine + i)],
                rows[static_cast<size_t>(k)] + i * kLine);
}

TEST(PrefetchSweep, EmptySweepHandsOutNothing) {
  EXPECT_TRUE(Lines({0, 8, 2048, 256, 256, 0}).empty());
  EXPECT_TRUE(Lines({-5, 8, 2048, 256, 256, 0}).empty());
  EXPECT_TRUE(Lines({16, 0, 2048, 256, 256, 0}).empty());
  EXPECT_TRUE(Lines({16, 8, 2048, 256, 0, 0}).empty());
}

} // namespace
