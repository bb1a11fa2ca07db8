/* Portable tiled attention: plain C for the baseline ISA, the fallback on
 * any CPU and the reference the SIMD kernels are compared with. */
#ifndef FLASHCPU_REF_REF_ATTENTION_H
#define FLASHCPU_REF_REF_ATTENTION_H

#include "common/problem.h"
#include "dispatch/kernel_table.h"
#include "flashcpu/flashcpu.h"
#include "runtime/runtime.h"

/* Computes the whole problem on the runtime's teams, converting inputs with
 * the table's row converters. Reserves scratch before writing anything, so
 * an OUT_OF_MEMORY return leaves out and lse untouched. */
flashcpu_status fc_ref_attention(flashcpu_context *ctx, fc_runtime *runtime,
                                 const fc_kernel_table *table,
                                 const fc_problem *p);

#endif
