/* A hint to the core that this thread is spinning on a memory location. */
#ifndef FLASHCPU_RUNTIME_CPU_RELAX_H
#define FLASHCPU_RUNTIME_CPU_RELAX_H

#if defined(__x86_64__)
#include <immintrin.h>
#define FC_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define FC_CPU_RELAX() __asm__ volatile("yield")
#else
#define FC_CPU_RELAX() ((void)0)
#endif

#endif
