/* A persistent pool: OpenMP threads that stay in one long-lived parallel
 * region (opened by a host thread the pool owns) and wait between launches,
 * spinning briefly and then sleeping. The caller's thread is thread 0. The
 * alternative is a parallel region per launch; the runtime measures both
 * (bench/) and uses the faster by default. */
#ifndef FLASHCPU_RUNTIME_POOL_H
#define FLASHCPU_RUNTIME_POOL_H

#include <stdbool.h>

typedef struct fc_pool fc_pool;
typedef void (*fc_pool_work)(void *args, int thread);

/* Starts thread_count - 1 workers. Returns NULL when they cannot all be had
 * (OpenMP gave fewer, out of memory); the caller then uses regions. */
fc_pool *fc_pool_start(int thread_count);
/* Runs work(args, t) on the calling thread as t = 0 and on the workers, and
 * returns when all that ran are done. One run at a time per pool.
 * any_threads false: every t in [0, thread_count) runs. true: the work
 * completes on any subset of threads that includes t = 0 (a shared
 * counter of tiles, no barriers), so a worker that has not joined by the
 * time thread 0 is done skips the run, and the call does not wait for
 * workers still waking from sleep. */
void fc_pool_run(fc_pool *pool, fc_pool_work work, void *args,
                 bool any_threads);
/* Wakes sleeping workers to wait for the next run spinning again (they
 * fall asleep after the usual wait if none comes). Any thread, any time. */
void fc_pool_alert(fc_pool *pool);
/* Stops and joins the workers. NULL is accepted. */
void fc_pool_stop(fc_pool *pool);

#endif
