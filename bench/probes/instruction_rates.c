/* flashcpu_instruction_rates: how long one VDPBF16PS and one VFMADD231PS
 * (zmm) take when 16 independent chains keep the units busy. Split-KV
 * decode picks its bf16 scores path by this trade (src/dispatch/
 * kernel_table.c): a VDPBF16PS does 32 multiply-adds, two FMAs' worth, so
 * it pays only where it costs less than two FMAs. */
#include <immintrin.h>
#include <stdio.h>
#include <string.h>

#include "common/timer.h"
#include "flashcpu/flashcpu.h"

enum { CHAINS = 16 };
static const long ITERATIONS = 20000000;

/* The empty asm keeps the multiplicands in registers the compiler cannot
 * fold away, so every iteration issues its CHAINS instructions. */
__attribute__((noinline)) static float dot_chains(long iterations) {
  __m512 acc[CHAINS];
  for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* 1.0 */
  __m512bh y = (__m512bh)_mm512_set1_epi16(0x3b80); /* 2^-8 */
  for (long k = 0; k < iterations; k++) {
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    __asm__ volatile("" : "+v"(x), "+v"(y));
  }
  __m512 sum = acc[0];
  for (int i = 1; i < CHAINS; i++) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

__attribute__((noinline)) static float fma_chains(long iterations) {
  __m512 acc[CHAINS];
  for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
  __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.5f);
  for (long k = 0; k < iterations; k++) {
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    __asm__ volatile("" : "+v"(x), "+v"(y));
  }
  __m512 sum = acc[0];
  for (int i = 1; i < CHAINS; i++) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

/* Best of 5 timings of fn, in ns per instruction. */
static double ns_per_instruction(float (*fn)(long), volatile float *sink) {
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    const double t0 = toolkit_now_seconds();
    *sink += fn(ITERATIONS);
    const double ns =
        (toolkit_now_seconds() - t0) * 1e9 / ((double)ITERATIONS * CHAINS);
    if (ns < best) best = ns;
  }
  return best;
}

int main(void) {
  char features[512];
  flashcpu_cpu_features(features, sizeof features);
  if (!strstr(features, "avx512_bf16")) {
    printf("flashcpu_instruction_rates: this CPU lacks AVX512-BF16 (has: "
           "%s)\n",
           features);
    return 0;
  }
  volatile float sink = 0.0f;
  const double fma = ns_per_instruction(fma_chains, &sink);
  const double dot = ns_per_instruction(dot_chains, &sink);
  printf("vfmadd231ps zmm %.3f ns, vdpbf16ps zmm %.3f ns (%.2f FMAs' time; "
         "it pays below 2)\n",
         fma, dot, dot / fma);
  return 0;
}
