/* Lets the internal headers that hold atomics be included from the C++
 * tests and benchmarks: on gcc and clang std::atomic<int> has the size and
 * alignment of _Atomic int, so both languages see one struct layout. */
#ifndef FLASHCPU_COMMON_PORTABLE_ATOMIC_H
#define FLASHCPU_COMMON_PORTABLE_ATOMIC_H

#ifdef __cplusplus
#include <atomic>
typedef std::atomic<int> fc_atomic_int;
#define FC_ALIGNAS(bytes) alignas(bytes)
#else
#include <stdatomic.h>
typedef atomic_int fc_atomic_int;
#define FC_ALIGNAS(bytes) _Alignas(bytes)
#endif

#endif
