// Every registry row the choice considers (not forced-only) wins some
// problem of its ISA on this CPU, under the defaults or one setting: no row
// is shadowed by the rows before it. Rows this CPU cannot run are skipped;
// forced-only rows are run by name to show the setting reaches them.
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, BF16 = FLASHCPU_DTYPE_BF16,
                         I8 = FLASHCPU_DTYPE_I8, E4M3 = FLASHCPU_DTYPE_F8_E4M3;
constexpr int64_t kHq = 8, kHkv = 2, kDim = 64, kKeys = 96;

struct Row {
  std::string name;
  flashcpu_isa isa;
  bool forced_only;
};

std::vector<Row> RunnableRows() {
  std::vector<Row> rows;
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++)
    if (info.runnable)
      rows.push_back({info.name, info.isa, info.forced_only != 0});
  return rows;
}

// One call of `rows` query rows on q/K/V of the dtypes (quantized K and V
// from f32 with a scale per token); the kernel that ran it, or "" with a
// failure.
std::string KernelFor(flashcpu_context *ctx, int64_t rows, flashcpu_dtype q_t,
                      flashcpu_dtype kv_t) {
  std::vector<float> values(static_cast<size_t>(kKeys * kHkv * kDim));
  for (size_t i = 0; i < values.size(); i++)
    values[i] = static_cast<float>((i * 37 % 101) - 50) / 64.0f;
  std::vector<unsigned char> q(static_cast<size_t>(rows * kHq * kDim * 4)),
      out(q.size());
  for (int64_t i = 0; i < rows * kHq * kDim; i++)
    StoreAs(q.data() + i * static_cast<int64_t>(flashcpu_dtype_size(q_t)), q_t,
            values[static_cast<size_t>(i) % values.size()]);
  std::vector<unsigned char> kv(values.size() * 4);
  std::vector<float> scales(static_cast<size_t>(kKeys * kHkv));
  flashcpu_kv_scales kv_scales = {
      scales.data(), F32, {kKeys * kHkv, kHkv, 1, 0}, nullptr};
  const flashcpu_tensor source =
      flashcpu_tensor_bshd(values.data(), F32, 1, kKeys, kHkv, kDim);
  flashcpu_tensor k =
      flashcpu_tensor_bshd(kv.data(), kv_t, 1, kKeys, kHkv, kDim);
  flashcpu_attention_params params;
  flashcpu_attention_params_init(&params);
  if (kv_t == I8 || kv_t == E4M3) {
    EXPECT_EQ(flashcpu_quantize(ctx, &source, &k, &kv_scales), FLASHCPU_OK)
        << flashcpu_last_error(ctx);
    params.k_scales = params.v_scales = &kv_scales;
  } else {
    for (size_t i = 0; i < values.size(); i++)
      StoreAs(kv.data() + i * flashcpu_dtype_size(kv_t), kv_t, values[i]);
  }
  const flashcpu_tensor qt =
      flashcpu_tensor_bshd(q.data(), q_t, 1, rows, kHq, kDim);
  const flashcpu_tensor ot =
      flashcpu_tensor_bshd(out.data(), F32, 1, rows, kHq, kDim);
  params.flags = FLASHCPU_FLAG_CAUSAL;
  const flashcpu_status status =
      flashcpu_attention(ctx, &qt, &k, &k, &ot, nullptr, &params);
  EXPECT_EQ(status, FLASHCPU_OK) << flashcpu_last_error(ctx);
  return status == FLASHCPU_OK ? flashcpu_context_last_kernels(ctx) : "";
}

// The ISAs this CPU runs, each with the rows it offers.
const flashcpu_isa kIsas[] = {FLASHCPU_ISA_AVX512, FLASHCPU_ISA_AVX2,
                              FLASHCPU_ISA_NEON, FLASHCPU_ISA_SCALAR};

TEST(RowStatus, EveryChosenRowWinsSomeProblemOfItsIsa) {
  const std::vector<Row> rows = RunnableRows();
  // The defaults, then each setting that turns a row on or off.
  const char *const settings[] = {"", "decode_bf16_dot = on",
                                  "prefill_bf16_dot = on; prefill_amx = off",
                                  "prefill_amx = off"};
  const flashcpu_dtype dtypes[][2] = {
      {F32, F32}, {BF16, BF16}, {BF16, I8}, {BF16, E4M3}};
  const int64_t row_counts[] = {1, 8, 40};
  for (flashcpu_isa isa : kIsas) {
    std::set<std::string> wanted;
    for (const Row &row : rows)
      if (row.isa == isa && !row.forced_only) wanted.insert(row.name);
    if (wanted.empty()) continue;
    std::set<std::string> won;
    for (const char *setting : settings) {
      flashcpu_context_options options = DefaultOptions();
      options.num_threads = 1;
      options.max_isa = isa;
      options.settings = setting;
      Context ctx(options);
      ASSERT_TRUE(ctx.ok()) << flashcpu_last_error(nullptr);
      if (flashcpu_context_isa(ctx) != isa) break; // a lower ISA stood in
      for (const auto &d : dtypes)
        for (int64_t n : row_counts) won.insert(KernelFor(ctx, n, d[0], d[1]));
    }
    for (const std::string &name : wanted)
      EXPECT_TRUE(won.count(name))
          << name << " (" << flashcpu_isa_name(isa)
          << ") wins none of the probes: the rows before it shadow it, or "
             "it should be forced-only";
  }
}

TEST(RowStatus, TheKernelSettingReachesForcedOnlyRows) {
  for (const Row &row : RunnableRows()) {
    if (!row.forced_only) continue;
    flashcpu_context_options options = DefaultOptions();
    options.num_threads = 1;
    options.max_isa = row.isa;
    const std::string setting = "kernel = " + row.name;
    options.settings = setting.c_str();
    Context ctx(options);
    ASSERT_TRUE(ctx.ok()) << flashcpu_last_error(nullptr);
    std::string ran;
    for (const auto &d : {std::pair<flashcpu_dtype, flashcpu_dtype>{BF16, I8},
                          {F32, I8},
                          {BF16, E4M3},
                          {BF16, BF16}}) {
      flashcpu_context *c = ctx;
      ScopedEnv quiet("FLASHCPU_VERBOSE", nullptr);
      // A forced row refuses what it cannot take: try the next dtypes.
      testing::TestPartResultArray failures;
      {
        testing::ScopedFakeTestPartResultReporter reporter(
            testing::ScopedFakeTestPartResultReporter::
                INTERCEPT_ONLY_CURRENT_THREAD,
            &failures);
        ran = KernelFor(c, 1, d.first, d.second);
      }
      if (!ran.empty()) break;
    }
    EXPECT_EQ(ran, row.name);
  }
}

} // namespace
} // namespace fctest
