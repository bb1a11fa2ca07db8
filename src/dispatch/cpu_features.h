/* What the CPU and the OS together let flashcpu use. Detected once per
 * process; every flag already includes the OS check (XCR0 through xgetbv on
 * x86, hwcaps on aarch64), so a set flag means the instructions will run. */
#ifndef FLASHCPU_DISPATCH_CPU_FEATURES_H
#define FLASHCPU_DISPATCH_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fc_cpu_features {
  /* x86-64 */
  bool avx2, fma, f16c;                       /* YMM state enabled */
  bool avx512f, avx512bw, avx512vl, avx512dq; /* ZMM + opmask state */
  bool avx512_bf16, avx512_fp16, avx512_vnni, avx512_vbmi;
  bool amx_bf16;      /* CPU has AMX-BF16 and AMX-TILE, XCR0 has tile state */
  bool amx_int8;      /* CPU has AMX-INT8 and AMX-TILE, XCR0 has tile state */
  bool amx_permitted; /* Linux granted this process the AMX tile data */
  bool vendor_amd;    /* cpuid vendor "AuthenticAMD" */
  /* aarch64 */
  bool neon, sve, arm_bf16, arm_fp16;
} fc_cpu_features;

/* The process-wide detection result (computed on first use, thread-safe). */
const fc_cpu_features *fc_cpu_features_get(void);

/* Writes a space-separated list of the features present into buffer
 * (truncated to size, NUL-terminated) and returns the full length. */
size_t fc_cpu_features_describe(const fc_cpu_features *features, char *buffer,
                                size_t size);

#endif
