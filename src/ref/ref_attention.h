/* Portable tiled attention: plain C for the baseline ISA, the fallback on
 * any CPU and the reference the SIMD kernels are compared with. */
#ifndef FLASHCPU_REF_REF_ATTENTION_H
#define FLASHCPU_REF_REF_ATTENTION_H

#include "common/problem.h"
#include "flashcpu/flashcpu.h"

/* Computes the whole problem with num_threads OpenMP threads. Allocates its
 * workspace before writing anything, so an OUT_OF_MEMORY return leaves out
 * and lse untouched. */
flashcpu_status fc_ref_attention(flashcpu_context *ctx, const fc_problem *p,
                                 int num_threads);

#endif
