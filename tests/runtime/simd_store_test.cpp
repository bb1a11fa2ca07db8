// The AVX-512 output store (fc512_store, how the AVX-512 and AMX prefill
// kernels write their rows) against the scalar fc_store_row every other
// kernel uses: the same bytes for f32, f16 and bf16 over values that test
// the roundings (ties to even, the f16 subnormal range and overflow, f32
// subnormals that bf16 keeps) and NaN, inf and signed zeros, with a factor
// and a tail shorter than a vector.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "flashcpu/flashcpu.h"

extern "C" {
void fc_test_store_avx512(const float *input, int count, float factor,
                          flashcpu_dtype dtype, void *output);
void fc_test_store_scalar(const float *input, int count, float factor,
                          flashcpu_dtype dtype, void *output);
}

namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

std::vector<float> EdgeValues() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {
      0.0f,
      -0.0f,
      1.0f,
      -1.0f,
      inf,
      -inf,
      std::numeric_limits<float>::quiet_NaN(),
      FromBits(0xffc00001u), // negative NaN with a payload
      FromBits(0x7f800001u), // signalling NaN
      FLT_MAX,
      -FLT_MAX,
      FLT_MIN,
      1e-40f,
      -1e-45f, // f32 subnormals
      65504.0f,
      65519.0f,
      65520.0f,
      70000.0f,
      -65536.0f, // f16 overflow
      6.1e-5f,
      3e-5f,
      5.96e-8f,
      2.98e-8f,
      2.9e-8f,
      1e-9f, // f16 subnormals
      FromBits(0x3f808000u),
      FromBits(0x3f818000u), // bf16 ties
      FromBits(0x3f807fffu),
      FromBits(0x3f808001u),
      FromBits(0x7f7f8000u), // bf16 rounds to inf
  };
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200; i++) values.push_back(FromBits(bits(random)));
  values.resize(values.size() - 3); // a tail of 13 lanes
  return values;
}

class SimdStore : public testing::TestWithParam<flashcpu_dtype> {
protected:
  void SetUp() override {
#if !defined(__x86_64__)
    GTEST_SKIP() << "the AVX-512 store is built for x86-64 only";
#endif
    if (!flashcpu_isa_supported(FLASHCPU_ISA_AVX512))
      GTEST_SKIP() << "this CPU (or its OS) lacks avx512";
  }
};

TEST_P(SimdStore, SameBytesAsTheScalarStore) {
  const flashcpu_dtype dtype = GetParam();
  const size_t size = dtype == FLASHCPU_DTYPE_F32 ? 4 : 2;
  const std::vector<float> values = EdgeValues();
  const int count = static_cast<int>(values.size());
  for (float factor : {1.0f, 0.3f, 1e-30f}) {
    std::vector<unsigned char> vector_bytes(values.size() * size + 8, 0xab);
    std::vector<unsigned char> scalar_bytes(vector_bytes);
    fc_test_store_avx512(values.data(), count, factor, dtype,
                         vector_bytes.data());
    fc_test_store_scalar(values.data(), count, factor, dtype,
                         scalar_bytes.data());
    for (size_t i = 0; i < vector_bytes.size(); i += size)
      ASSERT_EQ(0, std::memcmp(&vector_bytes[i], &scalar_bytes[i], size))
          << "element " << i / size << " (" << values[i / size % count] << " x "
          << factor << ")";
  }
}

const char *DtypeName(flashcpu_dtype dtype) {
  return dtype == FLASHCPU_DTYPE_F32   ? "f32"
         : dtype == FLASHCPU_DTYPE_F16 ? "f16"
                                       : "bf16";
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, SimdStore,
    testing::Values(FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16,
                    FLASHCPU_DTYPE_BF16),
    [](const testing::TestParamInfo<flashcpu_dtype> &param) {
      return std::string(DtypeName(param.param));
    });

} // namespace
