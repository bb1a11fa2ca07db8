/* What a kernel receives besides the checked problem: the runtime it
 * launches on, the context's row converters and settings, and room for a
 * short reason when it returns an error. Kernels never see the context,
 * the dispatch table or the API's error slots: the API layer turns the
 * reason into the call's message. */
#ifndef FLASHCPU_KERNELS_KERNEL_ENV_H
#define FLASHCPU_KERNELS_KERNEL_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/convert/convert.h"
#include "runtime/runtime.h"

/* The choices a context makes once (defaults, then the tune file, then the
 * context options): which kernel a problem takes and how it streams. None
 * changes what a kernel computes for a given split plan. */
typedef struct fc_kernel_settings {
  int64_t splitkv_max_rows;   /* split-KV for up to this many query rows */
  bool prefill_bf16_dot;      /* bf16 prefill by AVX512-BF16 dot products */
  bool prefill_amx;           /* bf16 prefill on AMX tiles */
  bool decode_bf16_dot;       /* bf16 q/K split-KV scores by dot products */
  bool decode_prefetch_l1;    /* split-KV prefetches the next block into L1 */
  int64_t prefill_tile_slots; /* query slots per prefill tile (0: the
                                 row's own) */
} fc_kernel_settings;

typedef struct fc_kernel_env {
  fc_runtime *runtime;
  const fc_row_to_f32_fn *row_to_f32; /* [3], indexed by flashcpu_dtype */
  fc_dequant_row_fn dequant_row;      /* quantized K/V rows */
  const fc_kernel_settings *settings;
  /* The chosen row's blocking, with the settings' overrides: query slots
   * per prefill tile (the K/V staging is amortised over them). */
  int64_t tile_slots;
  char *reason; /* out: why the kernel returned an error */
  size_t reason_size;
} fc_kernel_env;

#if defined(__GNUC__) || defined(__clang__)
#define FC_KERNEL_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define FC_KERNEL_PRINTF(fmt, first)
#endif

/* Writes the reason for a failure into env and returns status, so that a
 * kernel can `return fc_kernel_fail(env, ...)`. */
flashcpu_status fc_kernel_fail(const fc_kernel_env *env, flashcpu_status status,
                               const char *format, ...) FC_KERNEL_PRINTF(3, 4);

#endif
