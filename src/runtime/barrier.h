/* A team barrier (the CPU's threadgroup_barrier): only the threads of one
 * team wait. Sense by generation counter; spins briefly, then yields. */
#ifndef FLASHCPU_RUNTIME_BARRIER_H
#define FLASHCPU_RUNTIME_BARRIER_H

#include "common/portable_atomic.h"

typedef struct fc_barrier {
  FC_ALIGNAS(64) fc_atomic_int arrived;
  FC_ALIGNAS(64) fc_atomic_int generation;
  int size;
  int spins_before_yield; /* short when threads outnumber the PUs */
} fc_barrier;

/* oversubscribed: more threads than PUs, so a waiter should yield at once
 * rather than spin on a PU the thread it waits for needs. */
void fc_barrier_init(fc_barrier *barrier, int size, int oversubscribed);
/* Returns when all `size` threads have called it. Acts as a full memory
 * fence between what the threads wrote before and read after. */
void fc_barrier_wait(fc_barrier *barrier);

#endif
