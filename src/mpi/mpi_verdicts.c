/* The exchanges after the first: each rank's verdict (so that an error on
 * one rank stops every rank before the next collective), and the kv
 * lengths, from which every rank derives the same positions and the same
 * verdict on the ranges. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

#define CALL "flashcpu_mpi_attention"

flashcpu_status fcm_gather_verdicts(const fcm_call *call, void *mine,
                                    size_t size, flashcpu_status local_status,
                                    void **all) {
  fcm_verdict *verdict = mine;
  verdict->status = local_status;
  memset(verdict->message, 0, sizeof verdict->message);
  if (local_status != FLASHCPU_OK)
    snprintf(verdict->message, sizeof verdict->message, "%s", fcm_error());
  char *records = malloc((size_t)call->ranks * size);
  *all = records;
  if (!records) /* a few hundred bytes per rank: not worth a protocol */
    return fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY,
                    CALL ": out of memory for the ranks' verdicts");
  const int code = MPI_Allgather(mine, (int)size, MPI_BYTE, records, (int)size,
                                 MPI_BYTE, call->comm);
  if (code != MPI_SUCCESS) {
    free(records);
    *all = NULL;
    return fcm_mpi_fail(code, "MPI_Allgather");
  }
  for (int r = 0; r < call->ranks; r++) {
    const fcm_verdict *v = (const fcm_verdict *)(void *)(records + r * size);
    if (v->status != FLASHCPU_OK)
      return fcm_fail((flashcpu_status)v->status, "rank %d: %s", r, v->message);
  }
  return FLASHCPU_OK;
}

flashcpu_status fcm_agree(const fcm_call *call, flashcpu_status local_status) {
  fcm_verdict mine;
  void *all;
  const flashcpu_status status =
      fcm_gather_verdicts(call, &mine, sizeof mine, local_status, &all);
  free(all);
  return status;
}

flashcpu_status fcm_agree_on_lengths(fcm_call *call) {
  const int64_t batch = call->batch, ranks = call->ranks;
  int64_t *mine = malloc((size_t)batch * sizeof *mine);
  call->lengths = malloc((size_t)(ranks * batch) * sizeof(int64_t));
  call->starts = malloc((size_t)(ranks * batch) * sizeof(int64_t));
  call->totals = malloc((size_t)batch * sizeof(int64_t));
  flashcpu_status status = FLASHCPU_OK;
  if (!mine || !call->lengths || !call->starts || !call->totals)
    status = fcm_fail(FLASHCPU_ERROR_OUT_OF_MEMORY,
                      CALL ": out of memory for %lld kv lengths",
                      (long long)(ranks * batch));
  /* Agree on memory before the exchange that needs it. */
  if ((status = fcm_agree(call, status)) != FLASHCPU_OK) {
    free(mine);
    return status;
  }
  /* A paged call always has kv_lengths (fcm_check_paged). */
  for (int64_t b = 0; b < batch; b++)
    mine[b] =
        call->params.kv_lengths ? call->params.kv_lengths[b] : call->k->dims[1];
  if (batch > INT_MAX)
    return fcm_fail(FLASHCPU_ERROR_SIZE_OVERFLOW,
                    CALL ": %lld requests are more than MPI counts hold",
                    (long long)batch);
  const int code = MPI_Allgather(mine, (int)batch, MPI_INT64_T, call->lengths,
                                 (int)batch, MPI_INT64_T, call->comm);
  free(mine);
  if (code != MPI_SUCCESS) return fcm_mpi_fail(code, "MPI_Allgather");
  for (int64_t b = 0; b < batch; b++) {
    int64_t total = 0;
    for (int64_t r = 0; r < ranks; r++) {
      const int64_t n = call->lengths[r * batch + b];
      call->starts[r * batch + b] = total;
      if (n > 0 && total % call->chunk_keys != 0)
        return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                        CALL ": rank %lld's keys of request %lld begin at "
                             "position %lld, not a multiple of chunk_keys "
                             "%lld (ranks own whole chunks: every rank "
                             "before it must hold a multiple of chunk_keys)",
                        (long long)r, (long long)b, (long long)total,
                        (long long)call->chunk_keys);
      if (__builtin_add_overflow(total, n, &total))
        return fcm_fail(FLASHCPU_ERROR_SIZE_OVERFLOW,
                        CALL ": request %lld's keys overflow int64",
                        (long long)b);
    }
    call->totals[b] = total;
    const flashcpu_tree_mask *tree = call->params.tree_mask;
    if (tree && tree->num_keys > total)
      return fcm_fail(FLASHCPU_ERROR_INVALID_ARGUMENT,
                      CALL ": the tree mask covers %lld keys but request %lld "
                           "has only %lld on all ranks together",
                      (long long)tree->num_keys, (long long)b,
                      (long long)total);
  }
  return FLASHCPU_OK;
}
