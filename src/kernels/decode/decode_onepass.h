/* One-pass decode: one query row per (batch, kv head) tile; the tile's
 * threads share the GQA group's heads and stream each K and V row once for
 * all of them. */
#ifndef FLASHCPU_KERNELS_DECODE_DECODE_ONEPASS_H
#define FLASHCPU_KERNELS_DECODE_DECODE_ONEPASS_H

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "runtime/runtime.h"

struct fc_kernel_table;

/* The kernel keeps per-head state on the stack for at most this many query
 * heads per thread; the dispatcher sends larger groups elsewhere. */
#define FC_DECODE_MAX_HEADS_PER_THREAD 128

#if defined(__x86_64__)
flashcpu_status fc_attention_decode_onepass__avx512(
    flashcpu_context *ctx, fc_runtime *runtime,
    const struct fc_kernel_table *table, const fc_problem *p);
#endif

#endif
