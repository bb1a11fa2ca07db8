// Decode shapes (1 to 64 query rows) against the oracle on every kernel of
// the registry (split-KV decode cuts the keys into splits of >= 256 keys
// whose partial states merge in a tree; the prefill kernels take the same
// shapes). They cover split-KV's remainders (kv lengths not a multiple of
// the split or of the 16-key block, per-batch lengths 0 and 1), every mask,
// GQA shapes that leave padding slots, head_dims with and without a
// specialised copy and ones the template copies to f32 first, strides.
// determinism_test.cpp runs some of them at several thread counts.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attention_case.h"
#include "decode_cases.h"
#include "kernel_tester.h"

namespace fctest {
namespace {

void ConfigureDecode(AttentionCase &c, const DecodeCase &decode_case) {
  decode_case.configure(c);
}

using DecodeMatchesOracle = KernelSuite<DecodeCase>;

TEST_P(DecodeMatchesOracle, EveryRow) {
  AttentionCase c;
  c.seed(23);
  test_case().configure(c);
  Check(c);
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeMatchesOracle,
                         testing::ValuesIn(ForEveryKernel<DecodeCase>(
                             DecodeCases(),
                             TakesConfigured<DecodeCase>(ConfigureDecode))),
                         KernelParamName<DecodeCase>([](const DecodeCase &c) {
                           return std::string(c.name);
                         }));

} // namespace
} // namespace fctest
