/* The machine's two ceilings, measured in the same run as the attention
 * they judge (docs/performance.md): sustained read bandwidth (binds decode) and
 * fp32 FMA throughput (binds prefill), at a given OpenMP thread count. */
#ifndef FLASHCPU_TOOLS_CEILINGS_H
#define FLASHCPU_TOOLS_CEILINGS_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct toolkit_ceilings {
  int threads;
  double read_gbps;         /* GB/s, 1e9 bytes */
  double read_buffer_bytes; /* >= 4x the last-level cache */
  const char *read_isa;     /* vector loads used: "avx512", "avx2", ... */
  double fma_gflops;        /* fp32, 2 flops per FMA lane */
  const char *fma_isa;
  /* bf16 units, 2 flops per multiply-add; 0 where the CPU lacks them */
  double bf16_dot_gflops; /* VDPBF16PS */
  double amx_gflops;      /* TDPBF16PS on AMX tiles */
  double seconds;         /* what measuring took */
} toolkit_ceilings;

/* Measures both ceilings with `threads` OpenMP threads (best of several
 * short passes; well under a second in all). Returns 0, or -1 when the
 * buffer cannot be allocated (then read_gbps is 0). */
int toolkit_measure_ceilings(int threads, toolkit_ceilings *ceilings);

/* One line: "threads 2: read 24.1 GB/s (avx512, 128 MiB), fma 301.3
 * GFLOP/s (avx512)", then the bf16 units' rates where measured. */
void toolkit_print_ceilings(FILE *stream, const toolkit_ceilings *ceilings);

/* The unit a prefill kernel multiplies on, from the names
 * flashcpu_context_last_kernels() gives: AMX tiles, AVX512-BF16 dot
 * products, or fp32 FMA. */
typedef enum toolkit_unit {
  TOOLKIT_UNIT_FMA = 0,
  TOOLKIT_UNIT_BF16_DOT = 1,
  TOOLKIT_UNIT_AMX = 2
} toolkit_unit;
toolkit_unit toolkit_unit_of_kernels(const char *kernels);
/* Its measured peak (falls back to the FMA peak where it was not measured),
 * and a name for reports ("fp32 FMA peak", "AMX tile peak", ...). */
double toolkit_unit_gflops(const toolkit_ceilings *ceilings, toolkit_unit unit);
const char *toolkit_unit_name(toolkit_unit unit);

#ifdef __cplusplus
}
#endif

#endif
