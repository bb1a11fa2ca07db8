/* Keeps the tools' own OpenMP threads (ceiling loops, tensor filling) from
 * spinning while flashcpu is timed. An OpenMP runtime lets idle team
 * threads busy-wait after a parallel region (libomp: KMP_BLOCKTIME, 200 ms
 * by default); on a machine with one core per flashcpu thread they then
 * compete with flashcpu's workers. On the 16-core Xeon a decode call at kv
 * 16 on 16 threads took 38 us with them and 12 us with KMP_BLOCKTIME=0, one
 * run each (bench/LOG-early.md: later runs swung 12-37 us with the pool's spin
 * count too, so that figure mixes both effects). */
#ifndef FLASHCPU_TOOLS_QUIET_OPENMP_H
#define FLASHCPU_TOOLS_QUIET_OPENMP_H

#ifdef __cplusplus
extern "C" {
#endif

/* Sets OMP_WAIT_POLICY=passive unless the environment sets it (or libomp's
 * KMP_BLOCKTIME) or asks for FLASHCPU_LAUNCH=region (whose launches wait in
 * OpenMP): call first thing in main, before any OpenMP construct, since the
 * runtime reads its environment once. flashcpu's default pool waits in its
 * own loop, so this does not slow its launches. */
void toolkit_quiet_openmp(void);

#ifdef __cplusplus
}
#endif

#endif
