/* What every attention kernel does the same way around its inner loops:
 * reserving team scratch before anything is written, and finishing an
 * output row from its online-softmax state. Portable C (baseline TU). */
#ifndef FLASHCPU_KERNELS_KERNEL_SUPPORT_H
#define FLASHCPU_KERNELS_KERNEL_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/kernel_env.h"

/* Bytes of scratch a team of team_size threads needs for this kernel. */
typedef size_t (*fc_scratch_bytes_fn)(const void *args, int team_size);

/* Makes every team's scratch large enough for the largest team's need;
 * OUT_OF_MEMORY (with the reason in env) leaves outputs untouched. */
flashcpu_status fc_kernel_reserve_scratch(const fc_kernel_env *env,
                                          fc_scratch_bytes_fn bytes_for,
                                          const void *args);

/* Writes output row (b, row, head) from running max m (log2 domain), sum l
 * and unnormalised o, and its log-sum-exp: 0 and -inf when it saw no key. */
void fc_write_output_row(const fc_problem *p, int64_t b, int64_t row,
                         int64_t head, float m, float l, const float *o);

#endif
