/* The context's plan as text: for flashcpu_context_describe, the verbose
 * log and `flashcpu info`. */
#ifndef FLASHCPU_API_DESCRIBE_H
#define FLASHCPU_API_DESCRIBE_H

#include <stddef.h>

#include "flashcpu/flashcpu.h"

void fc_describe_to_stderr(const flashcpu_context *ctx);

#endif
