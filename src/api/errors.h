/* Recording the message that goes with a returned status. */
#ifndef FLASHCPU_API_ERRORS_H
#define FLASHCPU_API_ERRORS_H

#include "flashcpu/flashcpu.h"

#if defined(__GNUC__) || defined(__clang__)
#define FC_PRINTF_LIKE(fmt_index, first_arg)                                   \
  __attribute__((format(printf, fmt_index, first_arg)))
#else
#define FC_PRINTF_LIKE(fmt_index, first_arg)
#endif

/* Stores a formatted message in ctx (or in this thread's slot when ctx is
 * NULL) and returns status, so callers can write `return fc_fail(...)`. */
flashcpu_status fc_fail(flashcpu_context *ctx, flashcpu_status status,
                        const char *format, ...) FC_PRINTF_LIKE(3, 4);

/* Clears the message after a successful call. */
void fc_clear_error(flashcpu_context *ctx);

#endif
