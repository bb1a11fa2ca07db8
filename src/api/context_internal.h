/* The context behind the opaque flashcpu_context handle. */
#ifndef FLASHCPU_API_CONTEXT_INTERNAL_H
#define FLASHCPU_API_CONTEXT_INTERNAL_H

#include "flashcpu/flashcpu.h"

#define FC_ERROR_MESSAGE_SIZE 512

struct flashcpu_context {
  int num_threads;
  char last_error[FC_ERROR_MESSAGE_SIZE];
};

#endif
