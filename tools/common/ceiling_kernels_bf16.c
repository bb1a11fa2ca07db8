/* The bf16 units' ceiling loops: VDPBF16PS (AVX512-BF16) chains and
 * TDPBF16PS on four accumulator tiles (AMX), operands kept in registers, so
 * that they measure the unit's rate and not the memory's. Built with the
 * AMX flags; the dot loop uses no AMX instruction and runs on any CPU with
 * AVX512-BF16. Called only where the library says the unit runs. */
#include <immintrin.h>
#include <string.h>

#include "common/ceiling_kernels.h"

enum { DOT_CHAINS = 16 };

float toolkit_bf16_dot_loop(int64_t iterations) {
  __m512 acc[DOT_CHAINS];
  for (int c = 0; c < DOT_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* 1.0 */
  __m512bh y = (__m512bh)_mm512_set1_epi16(0x3b80); /* 2^-8 */
  for (int64_t i = 0; i < iterations; i++) {
    for (int c = 0; c < DOT_CHAINS; c++)
      acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
    __asm__ volatile("" : "+v"(x), "+v"(y)); /* not hoisted or folded */
  }
  __m512 total = acc[0];
  for (int c = 1; c < DOT_CHAINS; c++) total = _mm512_add_ps(total, acc[c]);
  return _mm512_reduce_add_ps(total);
}

void toolkit_amx_configure(void) {
  struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
  } config;
  memset(&config, 0, sizeof config);
  config.palette = 1;
  for (int t = 0; t < 8; t++) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

float toolkit_amx_loop(int64_t iterations) {
  toolkit_amx_configure();
  uint16_t ones[16 * 32];
  for (int i = 0; i < 16 * 32; i++) ones[i] = 0x3b80; /* 2^-8 */
  float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  /* 2 x 2 accumulators, as a prefill kernel's inner step */
  for (int64_t i = 0; i < iterations; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}
