/* What the output digest's files share: fixed pseudo-random inputs, the
 * hash, and the groups of problems each file runs. */
#ifndef FLASHCPU_TOOLS_OUTPUT_DIGEST_H
#define FLASHCPU_TOOLS_OUTPUT_DIGEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "flashcpu/flashcpu.h"

/* Restarts the input sequence. */
void digest_seed(uint64_t seed);
/* count values in [-2, 2] of dtype (f32, f16 or bf16), malloc'ed. */
void *digest_fill(int64_t count, flashcpu_dtype dtype);
/* FNV-1a of bytes, continuing hash. */
uint64_t digest_hash(uint64_t hash, const void *data, size_t bytes);

/* Set while a context forces one kernel by name: a problem that kernel
 * does not take prints "n/a" and is no failure. */
extern int digest_forced;

/* One line for a problem: its name, the ISA, the status, the hash of out
 * and lse (lse may be NULL) and the kernels that ran. 0 when the status is
 * OK (or n/a), else 1. */
int digest_report(const char *name, flashcpu_context *ctx,
                  flashcpu_status status, const void *out, size_t out_bytes,
                  const float *lse, size_t lse_count);

/* Each prints a line per problem and returns how many failed. */
int digest_table_cases(flashcpu_context *ctx);
int digest_engine_cases(flashcpu_context *ctx);
int digest_paged_cases(flashcpu_context *ctx);
/* Every problem again on each kernel this CPU runs, forced by name, so
 * that rows a default call never picks are covered too. */
int digest_forced_cases(int threads);

#endif
