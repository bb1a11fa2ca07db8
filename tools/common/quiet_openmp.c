#define _POSIX_C_SOURCE 200809L
#include "common/quiet_openmp.h"

#include <stdlib.h>
#include <string.h>

void toolkit_quiet_openmp(void) {
  if (getenv("OMP_WAIT_POLICY") || getenv("KMP_BLOCKTIME")) return;
  /* Region launches wait in OpenMP itself: leave them its default. */
  const char *launch = getenv("FLASHCPU_LAUNCH");
  if (launch && strcmp(launch, "region") == 0) return;
  setenv("OMP_WAIT_POLICY", "passive", 0);
}
