#include "runtime/barrier.h"

#include <sched.h>
#include <stdatomic.h>

#include "runtime/cpu_relax.h"

/* Spins this many times before yielding: a team's threads are pinned on
 * neighbouring cores, so waits are short unless the machine is oversubscribed.
 */
enum { SPINS_BEFORE_YIELD = 4096 };

void fc_barrier_init(fc_barrier *barrier, int size, int oversubscribed) {
  atomic_init(&barrier->arrived, 0);
  atomic_init(&barrier->generation, 0);
  barrier->size = size;
  barrier->spins_before_yield = oversubscribed ? 16 : SPINS_BEFORE_YIELD;
}

void fc_barrier_wait(fc_barrier *barrier) {
  if (barrier->size <= 1) return;
  int generation =
      atomic_load_explicit(&barrier->generation, memory_order_acquire);
  if (atomic_fetch_add_explicit(&barrier->arrived, 1, memory_order_acq_rel) ==
      barrier->size - 1) {
    atomic_store_explicit(&barrier->arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&barrier->generation, generation + 1,
                          memory_order_release);
    return;
  }
  int spins = 0;
  while (atomic_load_explicit(&barrier->generation, memory_order_acquire) ==
         generation) {
    if (++spins < barrier->spins_before_yield) {
      FC_CPU_RELAX();
    } else {
      sched_yield();
    }
  }
}
