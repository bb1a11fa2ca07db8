/* clock_gettime is POSIX, not C17: ask for it before any include. */
#define _POSIX_C_SOURCE 200809L
#include "common/timer.h"

#include <time.h>

double toolkit_now_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

void toolkit_sleep_seconds(double seconds) {
  struct timespec wait;
  wait.tv_sec = (time_t)seconds;
  wait.tv_nsec = (long)((seconds - (double)wait.tv_sec) * 1e9);
  while (nanosleep(&wait, &wait) != 0) {
  }
}
