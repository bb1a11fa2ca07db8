/* The launch model: a kernel is written the way a GPU kernel is. It is
 * called once per (tile, thread of the team running that tile) and sees its
 * team: index, size, its own rank, the team's scratch and barrier. All
 * threads of a team get the same tiles, in the same order. */
#ifndef FLASHCPU_RUNTIME_LAUNCH_H
#define FLASHCPU_RUNTIME_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/barrier.h"

typedef struct fc_team_view {
  int team, team_count; /* this team and how many run the launch */
  int size, rank;       /* threads in this team, this thread's index */
  void *scratch;        /* the team's scratch (shared by its threads) */
  size_t scratch_bytes;
  fc_barrier *barrier; /* waits for this team only */
} fc_team_view;

typedef void (*fc_tile_kernel)(void *args, int64_t tile,
                               const fc_team_view *team);
typedef int64_t (*fc_tile_weight)(const void *args, int64_t tile);

typedef struct fc_launch {
  fc_tile_kernel kernel;
  void *args;
  int64_t tile_count;
  /* Dynamic schedule (atomic tile counter) unless static_schedule: then
   * team t runs tiles t, t + team_count, ... in order. */
  bool static_schedule;
  /* Optional: dynamic tiles are handed out heaviest first. */
  fc_tile_weight weight;
} fc_launch;

#endif
