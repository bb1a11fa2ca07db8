#include "flashcpu/flashcpu.h"

int flashcpu_version(void) { return FLASHCPU_VERSION; }

const char *flashcpu_version_string(void) { return FLASHCPU_VERSION_STRING; }
