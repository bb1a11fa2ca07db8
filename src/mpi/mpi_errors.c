/* flashcpu_mpi_last_error's messages, one per thread. */
#include <stdarg.h>
#include <stdio.h>

#include "mpi/mpi_internal.h"

static _Thread_local char thread_error[FCM_MESSAGE_SIZE];

flashcpu_status fcm_fail(flashcpu_status status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(thread_error, sizeof thread_error, format, args);
  va_end(args);
  return status;
}

void fcm_clear_error(void) { thread_error[0] = '\0'; }

const char *fcm_error(void) { return thread_error; }

const char *flashcpu_mpi_last_error(void) { return thread_error; }

flashcpu_status fcm_mpi_fail(int code, const char *function) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    snprintf(text, sizeof text, "error code %d", code);
  return fcm_fail(FLASHCPU_ERROR_INTERNAL, "flashcpu_mpi_attention: %s: %s",
                  function, text);
}
