#define _POSIX_C_SOURCE 200809L
#include "common/quiet_openmp.h"

#include <stdlib.h>

void toolkit_quiet_openmp(void) {
  if (getenv("OMP_WAIT_POLICY") || getenv("KMP_BLOCKTIME")) return;
  setenv("OMP_WAIT_POLICY", "passive", 0);
}
