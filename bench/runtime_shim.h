/* A C door into the library's internal runtime for the C++ launch
 * benchmarks: the runtime headers are C17 (_Alignas, <stdatomic.h>) and do
 * not compile as C++ with every compiler. */
#ifndef FLASHCPU_BENCH_RUNTIME_SHIM_H
#define FLASHCPU_BENCH_RUNTIME_SHIM_H

#include <stdbool.h>

#include "flashcpu/flashcpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct runtime_shim runtime_shim;

/* A runtime of `threads` threads in teams of `level`, launching through a
 * persistent pool (pool true) or a parallel region per launch. NULL when it
 * cannot start, or when the pool was asked for and could not start. */
runtime_shim *runtime_shim_create(int threads, bool pool,
                                  flashcpu_team_level level);
void runtime_shim_destroy(runtime_shim *shim);

int runtime_shim_team_count(const runtime_shim *shim);
int runtime_shim_first_team_size(const runtime_shim *shim);

/* One tile per team that does nothing. Returns 0, or -1 on failure. */
int runtime_shim_launch_empty(runtime_shim *shim);
/* One tile per team whose threads wait on the team barrier `barriers`
 * times. Returns 0, or -1 on failure. */
int runtime_shim_launch_barriers(runtime_shim *shim, int barriers);

#ifdef __cplusplus
}
#endif

#endif
