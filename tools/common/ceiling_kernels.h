/* The loops that measure the machine's ceilings, one translation unit per
 * ISA (compiled with that ISA's flags; called only when the CPU has it). */
#ifndef FLASHCPU_TOOLS_CEILING_KERNELS_H
#define FLASHCPU_TOOLS_CEILING_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Independent FMA chains per loop iteration: more than latency x ports
 * (4 cycles x 2 ports on current cores), so the loop is bound by FMA
 * throughput and not by the latency of one chain. */
enum { TOOLKIT_FMA_CHAINS = 12 };

typedef struct toolkit_ceiling_kernels {
  const char *isa;
  int fma_lanes; /* fp32 lanes per vector FMA */
  /* Sum of data[0..count): streams the buffer through vector loads. */
  float (*read_sum)(const float *data, size_t count);
  /* iterations x TOOLKIT_FMA_CHAINS vector FMAs acc = acc * multiplier +
   * addend; returns a value that depends on all of them. */
  float (*fma_loop)(int64_t iterations, float multiplier, float addend);
} toolkit_ceiling_kernels;

/* Baseline build: NEON on aarch64, plain C (auto-vectorised) elsewhere. */
toolkit_ceiling_kernels toolkit_ceiling_kernels_portable(void);

#if defined(TOOLKIT_HAVE_X86_ISA_KERNELS)
toolkit_ceiling_kernels toolkit_ceiling_kernels_avx2(void);
toolkit_ceiling_kernels toolkit_ceiling_kernels_avx512(void);
#endif

#if defined(TOOLKIT_HAVE_BF16_UNIT_KERNELS)
/* iterations x 16 VDPBF16PS (zmm: 32 multiply-adds each). */
float toolkit_bf16_dot_loop(int64_t iterations);
/* Loads the AMX palette 1 configuration: eight tiles of 16 rows x 64
 * bytes, as the prefill kernel configures them. */
void toolkit_amx_configure(void);
/* iterations x 4 TDPBF16PS (16 x 16 x 32 multiply-adds each) on tiles it
 * configures and releases; AMX tile data must be granted to the process. */
float toolkit_amx_loop(int64_t iterations);
#endif

#ifdef __cplusplus
}
#endif

#endif
