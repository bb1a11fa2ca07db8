/* A monotonic wall clock for timing multithreaded (OpenMP) work, where the
 * calling thread's CPU time says nothing. */
#ifndef FLASHCPU_TOOLS_TIMER_H
#define FLASHCPU_TOOLS_TIMER_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double toolkit_now_seconds(void);

/* Sleeps for about `seconds` (a few milliseconds: long enough for the
 * idle threads of a pool to fall asleep). */
void toolkit_sleep_seconds(double seconds);

#ifdef __cplusplus
}
#endif

#endif
