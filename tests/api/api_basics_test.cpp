// The small public API around flashcpu_attention: version, status and dtype
// names, context lifetime and options, tensor view helpers, params defaults,
// kernel info, and the struct layouts each version accepts.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "c_abi_helpers.h"
#include "fixtures.h"
#include "flashcpu/flashcpu.h"

namespace {

TEST(Version, MacrosMatchRuntimeQuery) {
  EXPECT_EQ(flashcpu_version(), FLASHCPU_VERSION);
  EXPECT_EQ(FLASHCPU_VERSION, FLASHCPU_VERSION_MAJOR * 10000 +
                                  FLASHCPU_VERSION_MINOR * 100 +
                                  FLASHCPU_VERSION_PATCH);
  EXPECT_STREQ(flashcpu_version_string(), FLASHCPU_VERSION_STRING);
  const std::string expected = std::to_string(FLASHCPU_VERSION_MAJOR) + "." +
                               std::to_string(FLASHCPU_VERSION_MINOR) + "." +
                               std::to_string(FLASHCPU_VERSION_PATCH);
  EXPECT_EQ(expected, flashcpu_version_string());
}

TEST(StatusName, NamesEveryStatusWithoutPrefix) {
  // The values are pinned by the header: check them too.
  struct {
    flashcpu_status status;
    int value;
    const char *name;
  } const cases[] = {
      {FLASHCPU_OK, 0, "OK"},
      {FLASHCPU_ERROR_NULL_POINTER, 1, "NULL_POINTER"},
      {FLASHCPU_ERROR_INVALID_ARGUMENT, 2, "INVALID_ARGUMENT"},
      {FLASHCPU_ERROR_SHAPE_MISMATCH, 3, "SHAPE_MISMATCH"},
      {FLASHCPU_ERROR_BAD_LAYOUT, 4, "BAD_LAYOUT"},
      {FLASHCPU_ERROR_OVERLAP, 5, "OVERLAP"},
      {FLASHCPU_ERROR_UNSUPPORTED_DTYPE, 6, "UNSUPPORTED_DTYPE"},
      {FLASHCPU_ERROR_SIZE_OVERFLOW, 7, "SIZE_OVERFLOW"},
      {FLASHCPU_ERROR_OUT_OF_MEMORY, 8, "OUT_OF_MEMORY"},
      {FLASHCPU_ERROR_INTERNAL, 9, "INTERNAL"},
  };
  for (const auto &c : cases) {
    EXPECT_EQ(static_cast<int>(c.status), c.value) << c.name;
    EXPECT_STREQ(flashcpu_status_name(c.status), c.name);
  }
}

TEST(StatusName, UnknownValuesGetUnknownStatus) {
  for (int value : {-1, 10, 11, 1000}) {
    const char *name = fctest_status_name_of(value);
    ASSERT_NE(name, nullptr);
    EXPECT_STREQ(name, "UNKNOWN_STATUS") << value;
  }
}

TEST(Dtype, NamesAndSizes) {
  EXPECT_EQ(FLASHCPU_DTYPE_F32, 0);
  EXPECT_EQ(FLASHCPU_DTYPE_F16, 1);
  EXPECT_EQ(FLASHCPU_DTYPE_BF16, 2);
  EXPECT_STREQ(flashcpu_dtype_name(FLASHCPU_DTYPE_F32), "f32");
  EXPECT_STREQ(flashcpu_dtype_name(FLASHCPU_DTYPE_F16), "f16");
  EXPECT_STREQ(flashcpu_dtype_name(FLASHCPU_DTYPE_BF16), "bf16");
  EXPECT_EQ(flashcpu_dtype_size(FLASHCPU_DTYPE_F32), 4u);
  EXPECT_EQ(flashcpu_dtype_size(FLASHCPU_DTYPE_F16), 2u);
  EXPECT_EQ(flashcpu_dtype_size(FLASHCPU_DTYPE_BF16), 2u);
  // Quantized K/V storage: one byte per element, Q8_0 34 bytes per 32.
  const struct {
    flashcpu_dtype dtype;
    int value;
    const char *name;
    size_t size;
    int64_t block;
  } quantized[] = {{FLASHCPU_DTYPE_I8, 3, "i8", 1, 1},
                   {FLASHCPU_DTYPE_U8, 4, "u8", 1, 1},
                   {FLASHCPU_DTYPE_F8_E4M3, 5, "f8_e4m3", 1, 1},
                   {FLASHCPU_DTYPE_F8_E5M2, 6, "f8_e5m2", 1, 1},
                   {FLASHCPU_DTYPE_Q8_0, 7, "q8_0", 34, 32}};
  for (const auto &q : quantized) {
    EXPECT_EQ(static_cast<int>(q.dtype), q.value);
    EXPECT_STREQ(flashcpu_dtype_name(q.dtype), q.name);
    EXPECT_EQ(flashcpu_dtype_size(q.dtype), q.size);
    EXPECT_EQ(flashcpu_dtype_block(q.dtype), q.block);
  }
  EXPECT_EQ(flashcpu_dtype_block(FLASHCPU_DTYPE_BF16), 1);
}

TEST(Dtype, UnknownValuesGetUnknownAndZeroSize) {
  for (int value : {-1, 8, 9, 255}) {
    EXPECT_STREQ(fctest_dtype_name_of(value), "unknown") << value;
    EXPECT_EQ(fctest_dtype_size_of(value), 0u) << value;
  }
}

TEST(Context, CreateWithDefaultsAndDestroy) {
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  ASSERT_NE(ctx, nullptr);
  EXPECT_GE(flashcpu_context_num_threads(ctx), 1);
  EXPECT_STREQ(flashcpu_last_error(ctx), "");
  flashcpu_context_destroy(ctx);
}

TEST(Context, DestroyAcceptsNull) { flashcpu_context_destroy(nullptr); }

TEST(Context, OptionsInitSetsStructSizeAndDefaults) {
  flashcpu_context_options options;
  std::memset(&options, 0x5a, sizeof options);
  flashcpu_context_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(flashcpu_context_options));
  EXPECT_EQ(options.num_threads, 0);
  EXPECT_EQ(options.team_level, FLASHCPU_TEAM_AUTO);
  EXPECT_EQ(options.max_team_size, 0);
  EXPECT_EQ(options.max_isa, FLASHCPU_ISA_AUTO);
  EXPECT_EQ(options.tune_file, nullptr);
  EXPECT_EQ(options.settings, nullptr);
  EXPECT_EQ(options.host_openmp, nullptr);
}

TEST(Context, HonoursExplicitThreadCount) {
  for (int threads : {1, 2, 3, 7}) {
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.num_threads = threads;
    flashcpu_context *ctx = nullptr;
    ASSERT_EQ(flashcpu_context_create(&options, &ctx), FLASHCPU_OK);
    EXPECT_EQ(flashcpu_context_num_threads(ctx), threads);
    flashcpu_context_destroy(ctx);
  }
}

TEST(Context, DefaultThreadCountFollowsOmpNumThreads) {
  fctest::ScopedEnv threads("OMP_NUM_THREADS", "5");
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  EXPECT_EQ(flashcpu_context_num_threads(ctx), 5);
  flashcpu_context_destroy(ctx);
}

TEST(Context, RejectsNegativeThreadCount) {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.num_threads = -1;
  flashcpu_context *ctx =
      reinterpret_cast<flashcpu_context *>(&options); // not NULL
  EXPECT_EQ(flashcpu_context_create(&options, &ctx),
            FLASHCPU_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("num_threads"),
            std::string::npos)
      << flashcpu_last_error(nullptr);
}

// Two layouts are accepted: this version's and 0.1.0's (see tune_file_test);
// the sizes of the pre-release layouts between them are not.
TEST(Context, RejectsWrongStructSize) {
  for (size_t size : {size_t{0}, sizeof(flashcpu_context_options) - 1,
                      sizeof(flashcpu_context_options) + 8,
                      offsetof(flashcpu_context_options, settings),
                      offsetof(flashcpu_context_options, host_openmp)}) {
    flashcpu_context_options options;
    flashcpu_context_options_init(&options);
    options.struct_size = size;
    flashcpu_context *ctx = reinterpret_cast<flashcpu_context *>(&options);
    EXPECT_EQ(flashcpu_context_create(&options, &ctx),
              FLASHCPU_ERROR_INVALID_ARGUMENT)
        << size;
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("struct_size"),
              std::string::npos)
        << flashcpu_last_error(nullptr);
  }
}

TEST(Context, RejectsNullOutputPointer) {
  EXPECT_EQ(flashcpu_context_create(nullptr, nullptr),
            FLASHCPU_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(flashcpu_last_error(nullptr)).find("ctx"),
            std::string::npos)
      << flashcpu_last_error(nullptr);
}

TEST(Context, SuccessfulCreateClearsThreadError) {
  flashcpu_context_create(nullptr, nullptr); // leaves a message
  ASSERT_STRNE(flashcpu_last_error(nullptr), "");
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  EXPECT_STREQ(flashcpu_last_error(nullptr), "");
  flashcpu_context_destroy(ctx);
}

TEST(Context, NumThreadsOfNullIsZero) {
  EXPECT_EQ(flashcpu_context_num_threads(nullptr), 0);
}

TEST(TensorHelpers, BshdIsContiguousBatchSeqHeadsHeadDim) {
  int data = 0;
  const flashcpu_tensor t =
      flashcpu_tensor_bshd(&data, FLASHCPU_DTYPE_F16, 2, 5, 3, 7);
  EXPECT_EQ(t.data, &data);
  EXPECT_EQ(t.dtype, FLASHCPU_DTYPE_F16);
  const int64_t dims[4] = {2, 5, 3, 7}, strides[4] = {5 * 3 * 7, 3 * 7, 7, 1};
  for (int d = 0; d < 4; d++) {
    EXPECT_EQ(t.dims[d], dims[d]) << d;
    EXPECT_EQ(t.strides[d], strides[d]) << d;
  }
}

TEST(TensorHelpers, BhsdKeepsDimOrderButHeadsOutsideSeq) {
  int data = 0;
  // Arguments in memory order (batch, heads, seq, head_dim); dims stay in
  // the API's order [batch, seq, heads, head_dim].
  const flashcpu_tensor t =
      flashcpu_tensor_bhsd(&data, FLASHCPU_DTYPE_BF16, 2, 3, 5, 7);
  EXPECT_EQ(t.dtype, FLASHCPU_DTYPE_BF16);
  const int64_t dims[4] = {2, 5, 3, 7}, strides[4] = {3 * 5 * 7, 7, 5 * 7, 1};
  for (int d = 0; d < 4; d++) {
    EXPECT_EQ(t.dims[d], dims[d]) << d;
    EXPECT_EQ(t.strides[d], strides[d]) << d;
  }
}

TEST(TensorHelpers, DimIndexConstants) {
  EXPECT_EQ(FLASHCPU_DIM_BATCH, 0);
  EXPECT_EQ(FLASHCPU_DIM_SEQ, 1);
  EXPECT_EQ(FLASHCPU_DIM_HEADS, 2);
  EXPECT_EQ(FLASHCPU_DIM_HEAD_DIM, 3);
}

TEST(Params, InitGivesDocumentedDefaults) {
  flashcpu_attention_params params;
  std::memset(&params, 0x5a, sizeof params);
  flashcpu_attention_params_init(&params);
  EXPECT_EQ(params.struct_size, sizeof(flashcpu_attention_params));
  EXPECT_EQ(params.scale, 0.0f);
  EXPECT_EQ(params.flags, 0u);
  EXPECT_EQ(params.window_left, -1);
  EXPECT_EQ(params.window_right, -1);
  EXPECT_EQ(params.softcap, 0.0f);
  EXPECT_EQ(params.tree_mask, nullptr);
  EXPECT_EQ(params.additive_mask, nullptr);
  EXPECT_EQ(params.kv_lengths, nullptr);
  EXPECT_EQ(params.sinks, nullptr);
  EXPECT_EQ(params.alibi_slopes, nullptr);
  EXPECT_EQ(params.k_scales, nullptr);
  EXPECT_EQ(params.v_scales, nullptr);
}

// 0.1.0's params end before the sinks: a struct of that size is accepted
// and what lies past its end is never read.
TEST(Params, StructOfVersion010IsAcceptedAndItsTailNotRead) {
  float q[4] = {0.5f, -1.0f, 0.25f, 2.0f}, k[8] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
  float v[8] = {1, 0, 0, 1, 2, 3, -1, 4}, out[2][4] = {};
  const flashcpu_tensor tq =
      flashcpu_tensor_bshd(q, FLASHCPU_DTYPE_F32, 1, 1, 1, 4);
  const flashcpu_tensor tk =
      flashcpu_tensor_bshd(k, FLASHCPU_DTYPE_F32, 1, 2, 1, 4);
  const flashcpu_tensor tv =
      flashcpu_tensor_bshd(v, FLASHCPU_DTYPE_F32, 1, 2, 1, 4);
  const float sink = 3.0f;
  flashcpu_context *ctx = nullptr;
  ASSERT_EQ(flashcpu_context_create(nullptr, &ctx), FLASHCPU_OK);
  for (int version = 0; version < 2; version++) {
    flashcpu_attention_params params;
    flashcpu_attention_params_init(&params);
    params.sinks = &sink; // changes the result wherever it is read
    if (version == 0)
      params.struct_size = offsetof(flashcpu_attention_params, sinks);
    const flashcpu_tensor to =
        flashcpu_tensor_bshd(out[version], FLASHCPU_DTYPE_F32, 1, 1, 1, 4);
    ASSERT_EQ(flashcpu_attention(ctx, &tq, &tk, &tv, &to, nullptr, &params),
              FLASHCPU_OK)
        << flashcpu_last_error(ctx);
  }
  flashcpu_attention_params plain;
  flashcpu_attention_params_init(&plain);
  float expected[4] = {};
  const flashcpu_tensor te =
      flashcpu_tensor_bshd(expected, FLASHCPU_DTYPE_F32, 1, 1, 1, 4);
  ASSERT_EQ(flashcpu_attention(ctx, &tq, &tk, &tv, &te, nullptr, &plain),
            FLASHCPU_OK);
  EXPECT_EQ(std::memcmp(out[0], expected, sizeof expected), 0);
  EXPECT_NE(std::memcmp(out[1], expected, sizeof expected), 0);
  flashcpu_context_destroy(ctx);
}

TEST(KernelInfo, InitSetsStructSizeAndGetFillsEveryField) {
  flashcpu_kernel_info info;
  std::memset(&info, 0x5a, sizeof info);
  flashcpu_kernel_info_init(&info);
  EXPECT_EQ(info.struct_size, sizeof(flashcpu_kernel_info));
  EXPECT_EQ(info.name, nullptr);
  int count = 0;
  for (; flashcpu_kernel_info_get(count, &info); count++) {
    ASSERT_NE(info.name, nullptr);
    ASSERT_NE(info.family, nullptr);
    EXPECT_TRUE(std::string(info.family) == "prefill" ||
                std::string(info.family) == "split-KV decode")
        << info.family;
    EXPECT_TRUE(info.runnable == 0 || info.runnable == 1);
  }
  EXPECT_GT(count, 0);
  flashcpu_kernel_info_init(&info);
  EXPECT_EQ(flashcpu_kernel_info_get(-1, &info), 0);
  EXPECT_EQ(flashcpu_kernel_info_get(count, &info), 0);
  EXPECT_EQ(info.name, nullptr); // untouched past the last
  EXPECT_EQ(flashcpu_kernel_info_get(0, nullptr), 0);
}

TEST(KernelInfo, UnknownStructSizeWritesNothingAndSaysWhy) {
  for (size_t size : {size_t{0}, sizeof(flashcpu_kernel_info) - 4,
                      sizeof(flashcpu_kernel_info) + 8}) {
    flashcpu_kernel_info info;
    flashcpu_kernel_info_init(&info);
    info.struct_size = size;
    EXPECT_EQ(flashcpu_kernel_info_get(0, &info), 0) << size;
    EXPECT_EQ(info.name, nullptr) << size;
    const std::string message = flashcpu_last_error(nullptr);
    EXPECT_NE(message.find("struct_size"), std::string::npos) << message;
    EXPECT_NE(message.find("flashcpu_kernel_info_init"), std::string::npos)
        << message;
  }
}

} // namespace
