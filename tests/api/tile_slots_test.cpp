// The prefill blocking a row carries (query slots per tile) and the setting
// prefill_tile_slots that overrides it: describe shows what each prefill
// row runs with, and every value gives the same bytes (tiles only group
// query rows; each row's arithmetic is the same in any tile).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "fixtures.h"

namespace fctest {
namespace {

constexpr flashcpu_dtype F32 = FLASHCPU_DTYPE_F32, BF16 = FLASHCPU_DTYPE_BF16;

std::vector<unsigned char> BytesWith(const std::string &kernel,
                                     const std::string &slots,
                                     flashcpu_dtype dtype) {
  flashcpu_context_options options = DefaultOptions();
  options.num_threads = 2;
  const std::string settings =
      "kernel = " + kernel + "; prefill_tile_slots = " + slots;
  options.settings = settings.c_str();
  Context ctx(options);
  EXPECT_TRUE(ctx.ok()) << flashcpu_last_error(nullptr);
  if (!ctx.ok()) return {};
  const std::string text = ContextDescription(ctx);
  const std::string shown =
      slots == "0" ? "(tile slots " : "(tile slots " + slots + ")";
  EXPECT_NE(text.find(kernel + " " + shown), std::string::npos) << text;
  AttentionCase c;
  c.batch(2).q_len(70).kv_len(150).heads(8, 2).head_dim(64);
  c.dtypes(dtype, dtype, F32).causal().seed(5);
  EXPECT_EQ(c.Run(ctx), FLASHCPU_OK) << flashcpu_last_error(ctx);
  return c.out_bytes();
}

TEST(TileSlots, EveryValueGivesThePrefillRowsTheirBytes) {
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  int checked = 0;
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++) {
    if (!info.runnable || std::string(info.family) != "prefill") continue;
    const std::string name = info.name;
    const flashcpu_dtype dtype =
        info.weights_dtype == BF16 && name.find("scalar") == std::string::npos
            ? BF16
            : F32;
    const std::vector<unsigned char> reference = BytesWith(name, "0", dtype);
    for (const char *slots : {"16", "100", "8192"})
      EXPECT_EQ(BytesWith(name, slots, dtype), reference)
          << name << " with prefill_tile_slots = " << slots;
    checked++;
  }
  EXPECT_GT(checked, 0); // the portable row runs everywhere
}

} // namespace
} // namespace fctest
