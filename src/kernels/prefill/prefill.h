/* SIMD prefill: any number of query rows, every mask and dtype, on the
 * team runtime. One kernel per ISA, all compiled from prefill_tiled.inc. */
#ifndef FLASHCPU_KERNELS_PREFILL_PREFILL_H
#define FLASHCPU_KERNELS_PREFILL_PREFILL_H

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "runtime/runtime.h"

struct fc_kernel_table;

#define FC_DECLARE_PREFILL(isa)                                                \
  flashcpu_status fc_attention_prefill__##isa(                                 \
      flashcpu_context *ctx, fc_runtime *runtime,                              \
      const struct fc_kernel_table *table, const fc_problem *p)

#if defined(__x86_64__)
FC_DECLARE_PREFILL(avx512);
FC_DECLARE_PREFILL(avx512bf16);
FC_DECLARE_PREFILL(avx2);
#endif
#if defined(__aarch64__)
FC_DECLARE_PREFILL(neon);
#endif

#endif
