#include "runtime/pool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/cpu_relax.h"

/* Waiting, in three steps: spin on the line (a launch usually follows
 * within microseconds), then spin but yield the CPU between looks (another
 * thread, perhaps the one we wait for, may need this core), then, for
 * workers idle this long, sleep on the condition variable. 4096 spins (the
 * barrier's count): with fewer, the workers of short calls were already
 * yielding when the next launch came (docs/performance.md). */
enum { SPINS_BEFORE_YIELD = 4096, SPINS_BEFORE_SLEEP = 1 << 14 };

#define GATE_CLOSED (UINT64_C(1) << 31)
#define GATE_JOINED (GATE_CLOSED - 1)

static void spin_once(int spins) {
  if (spins < SPINS_BEFORE_YIELD) {
    FC_CPU_RELAX();
  } else {
    sched_yield();
  }
}

struct fc_pool {
  int thread_count;
  pthread_t host;
  _Alignas(64) atomic_uint generation; /* bumped once per run */
  /* The run's gate: its generation in the high half, GATE_CLOSED and the
   * workers that joined in the low half. A worker runs the work only
   * after joining an open gate of the generation it woke for, so one
   * that wakes late never touches a finished run's work or args. */
  _Alignas(64) atomic_uint_least64_t gate;
  _Alignas(64) atomic_int finished; /* joined workers done with this run */
  atomic_int ready;                 /* workers that entered the loop */
  atomic_int sleepers;
  atomic_uint alerts; /* bumped by fc_pool_alert */
  atomic_bool stopping;
  atomic_bool failed; /* OpenMP gave the host fewer threads */
  fc_pool_work work;  /* written before the generation bump (release) */
  void *args;
  pthread_mutex_t mutex;
  pthread_cond_t wake;
};

/* Waits until the generation moves past `seen`: spins, yields, then
 * sleeps; an alert (fc_pool_alert) wakes a sleeper and restarts the
 * spinning, so that a run soon after it finds the worker awake. */
static void wait_for_generation(fc_pool *pool, unsigned seen) {
  unsigned alerts = atomic_load_explicit(&pool->alerts, memory_order_relaxed);
  for (;;) {
    for (int spins = 0; spins < SPINS_BEFORE_SLEEP; spins++) {
      if (atomic_load_explicit(&pool->generation, memory_order_acquire) != seen)
        return;
      const unsigned now =
          atomic_load_explicit(&pool->alerts, memory_order_relaxed);
      if (now != alerts) { /* spin afresh */
        alerts = now;
        spins = -1;
        continue;
      }
      spin_once(spins);
    }
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add(&pool->sleepers, 1);
    /* seq_cst with the runner's (or alerter's) bump-then-check: one of us
     * sees the other. */
    while (atomic_load(&pool->generation) == seen &&
           atomic_load(&pool->alerts) == alerts)
      pthread_cond_wait(&pool->wake, &pool->mutex);
    atomic_fetch_sub(&pool->sleepers, 1);
    pthread_mutex_unlock(&pool->mutex);
    alerts = atomic_load_explicit(&pool->alerts, memory_order_relaxed);
  }
}

/* Joins the run of generation `seen` if its gate is still open. */
static bool join_run(fc_pool *pool, unsigned seen) {
  uint64_t gate = atomic_load_explicit(&pool->gate, memory_order_acquire);
  for (;;) {
    if ((unsigned)(gate >> 32) != seen || (gate & GATE_CLOSED)) return false;
    if (atomic_compare_exchange_weak_explicit(&pool->gate, &gate, gate + 1,
                                              memory_order_acq_rel,
                                              memory_order_acquire))
      return true;
  }
}

static void worker_loop(fc_pool *pool, int thread) {
  unsigned seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
  atomic_fetch_add(&pool->ready, 1);
  for (;;) {
    wait_for_generation(pool, seen);
    seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
    if (atomic_load(&pool->stopping)) return;
    if (!join_run(pool, seen)) continue; /* closed: woke too late */
    pool->work(pool->args, thread);
    atomic_fetch_add_explicit(&pool->finished, 1, memory_order_release);
  }
}

static void *host_main(void *opaque) {
  fc_pool *pool = opaque;
  int workers = pool->thread_count - 1;
#pragma omp parallel num_threads(workers)
  {
    if (omp_get_num_threads() != workers) {
      atomic_store(&pool->failed, true);
    } else {
      worker_loop(pool, omp_get_thread_num() + 1);
    }
  }
  return NULL;
}

static void broadcast_if_sleeping(fc_pool *pool) {
  if (atomic_load(&pool->sleepers) > 0) {
    pthread_mutex_lock(&pool->mutex);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
  }
}

static void wake_all(fc_pool *pool) {
  atomic_fetch_add(&pool->generation, 1); /* seq_cst: see wait_for_generation */
  broadcast_if_sleeping(pool);
}

fc_pool *fc_pool_start(int thread_count) {
  if (thread_count < 2) return NULL; /* nothing to keep alive */
  fc_pool *pool = calloc(1, sizeof *pool);
  if (!pool) return NULL;
  pool->thread_count = thread_count;
  atomic_init(&pool->generation, 0);
  atomic_init(&pool->gate, GATE_CLOSED);
  atomic_init(&pool->finished, 0);
  atomic_init(&pool->ready, 0);
  atomic_init(&pool->sleepers, 0);
  atomic_init(&pool->alerts, 0);
  atomic_init(&pool->stopping, false);
  atomic_init(&pool->failed, false);
  pthread_mutex_init(&pool->mutex, NULL);
  pthread_cond_init(&pool->wake, NULL);
  if (pthread_create(&pool->host, NULL, host_main, pool) != 0) {
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    free(pool);
    return NULL;
  }
  /* Wait until every worker is parked, or OpenMP said no. */
  while (atomic_load(&pool->ready) < thread_count - 1 &&
         !atomic_load(&pool->failed))
    sched_yield();
  if (atomic_load(&pool->failed)) {
    fc_pool_stop(pool);
    return NULL;
  }
  return pool;
}

void fc_pool_run(fc_pool *pool, fc_pool_work work, void *args,
                 bool any_threads) {
  const int workers = pool->thread_count - 1;
  pool->work = work;
  pool->args = args;
  atomic_store_explicit(&pool->finished, 0, memory_order_relaxed);
  const unsigned next =
      atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1u;
  /* Published by the generation bump in wake_all. */
  atomic_store_explicit(&pool->gate, (uint64_t)next << 32,
                        memory_order_relaxed);
  wake_all(pool);
  work(args, 0);
  int joined = workers;
  if (any_threads) {
    /* Workers still waking (asleep when the run began: 0.1 ms and more
     * on some machines) find the gate closed; the tiles are done. */
    const uint64_t gate = atomic_fetch_or_explicit(&pool->gate, GATE_CLOSED,
                                                   memory_order_acq_rel);
    joined = (int)(gate & GATE_JOINED);
  }
  for (int spins = 0;
       atomic_load_explicit(&pool->finished, memory_order_acquire) < joined;
       spins++)
    spin_once(spins);
  /* Closed for stragglers of a run that waited for every worker, too. */
  atomic_store_explicit(&pool->gate, GATE_CLOSED, memory_order_relaxed);
}

void fc_pool_alert(fc_pool *pool) {
  atomic_fetch_add(&pool->alerts, 1); /* seq_cst: see wait_for_generation */
  broadcast_if_sleeping(pool);
}

void fc_pool_stop(fc_pool *pool) {
  if (!pool) return;
  atomic_store(&pool->stopping, true);
  wake_all(pool);
  pthread_join(pool->host, NULL);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->mutex);
  free(pool);
}
