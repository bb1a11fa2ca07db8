#include "api/errors.h"

#include <stdarg.h>
#include <stdio.h>

#include "api/context_internal.h"

/* Failures of calls without a usable context land here, per thread. */
static _Thread_local char thread_error[FC_ERROR_MESSAGE_SIZE];

static char *error_slot(flashcpu_context *ctx) {
  return ctx ? ctx->last_error : thread_error;
}

flashcpu_status fc_fail(flashcpu_context *ctx, flashcpu_status status,
                        const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(error_slot(ctx), FC_ERROR_MESSAGE_SIZE, format, args);
  va_end(args);
  return status;
}

void fc_clear_error(flashcpu_context *ctx) { error_slot(ctx)[0] = '\0'; }

const char *flashcpu_last_error(const flashcpu_context *ctx) {
  return ctx ? ctx->last_error : thread_error;
}

const char *flashcpu_status_name(flashcpu_status status) {
  switch (status) {
  case FLASHCPU_OK:
    return "OK";
  case FLASHCPU_ERROR_NULL_POINTER:
    return "NULL_POINTER";
  case FLASHCPU_ERROR_INVALID_ARGUMENT:
    return "INVALID_ARGUMENT";
  case FLASHCPU_ERROR_SHAPE_MISMATCH:
    return "SHAPE_MISMATCH";
  case FLASHCPU_ERROR_BAD_LAYOUT:
    return "BAD_LAYOUT";
  case FLASHCPU_ERROR_OVERLAP:
    return "OVERLAP";
  case FLASHCPU_ERROR_UNSUPPORTED_DTYPE:
    return "UNSUPPORTED_DTYPE";
  case FLASHCPU_ERROR_SIZE_OVERFLOW:
    return "SIZE_OVERFLOW";
  case FLASHCPU_ERROR_OUT_OF_MEMORY:
    return "OUT_OF_MEMORY";
  case FLASHCPU_ERROR_INTERNAL:
    return "INTERNAL";
  }
  return "UNKNOWN_STATUS";
}
