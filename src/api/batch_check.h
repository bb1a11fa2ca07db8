/* flashcpu_plan_create's checks of a step's batch against its cache. */
#ifndef FLASHCPU_API_BATCH_CHECK_H
#define FLASHCPU_API_BATCH_CHECK_H

#include "flashcpu/flashcpu.h"

/* OK, or the status with a message naming the field and the index. */
flashcpu_status fc_check_batch(flashcpu_context *ctx,
                               const flashcpu_batch *batch,
                               const flashcpu_paged_kv *kv);

#endif
