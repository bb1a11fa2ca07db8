/* Keeps the tools' own OpenMP threads (ceiling loops, tensor filling) from
 * spinning while flashcpu is timed. An OpenMP runtime lets idle team
 * threads busy-wait after a parallel region (libomp: KMP_BLOCKTIME, 200 ms
 * by default); on a machine with one core per flashcpu thread they then
 * compete with flashcpu's workers (docs/performance.md has the figures). */
#ifndef FLASHCPU_TOOLS_QUIET_OPENMP_H
#define FLASHCPU_TOOLS_QUIET_OPENMP_H

#ifdef __cplusplus
extern "C" {
#endif

/* Sets OMP_WAIT_POLICY=passive unless the environment sets it (or libomp's
 * KMP_BLOCKTIME): call first thing in main, before any OpenMP construct,
 * since the runtime reads its environment once. flashcpu's default pool
 * waits in its own loop, so this does not slow its launches; a context with
 * launch = region waits in OpenMP, so time that setting with OMP_WAIT_POLICY
 * set explicitly. */
void toolkit_quiet_openmp(void);

#ifdef __cplusplus
}
#endif

#endif
