/* The ring's buffers kept with the communicator between calls: a prefill's
 * K/V blocks and f32 states are hundreds of MiB, and memory fresh from the
 * system costs a page fault and a zeroed page per 4 KiB on first touch
 * (a third of the tile kernel's time in a 4K-row ring). MPI's attribute
 * caching frees the buffer with the communicator (MPI_COMM_WORLD's at
 * MPI_Finalize). */
#include <stdlib.h>
#include <threads.h>

#include "mpi/mpi_internal.h"

typedef struct kept_buffer {
  void *data;
  size_t size;
} kept_buffer;

static int keyval = MPI_KEYVAL_INVALID;
static once_flag keyval_once = ONCE_FLAG_INIT;

static int free_kept(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)extra;
  kept_buffer *kept = value;
  free(kept->data);
  free(kept);
  return MPI_SUCCESS;
}

static void create_keyval(void) {
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_kept, &keyval, NULL);
}

void *fcm_comm_buffer(MPI_Comm comm, size_t bytes) {
  call_once(&keyval_once, create_keyval);
  if (keyval == MPI_KEYVAL_INVALID) return NULL;
  kept_buffer *kept = NULL;
  int found = 0;
  MPI_Comm_get_attr(comm, keyval, &kept, &found);
  if (found && kept->size >= bytes) return kept->data;
  if (!found) {
    kept = calloc(1, sizeof *kept);
    if (!kept) return NULL;
    if (MPI_Comm_set_attr(comm, keyval, kept) != MPI_SUCCESS) {
      free(kept);
      return NULL;
    }
  }
  free(kept->data); /* grown: the old contents are not needed */
  kept->data = malloc(bytes);
  kept->size = kept->data ? bytes : 0;
  return kept->data;
}
