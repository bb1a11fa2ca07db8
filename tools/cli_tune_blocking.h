/* `flashcpu tune`'s blocking race: the prefill kernel's query slots per
 * tile (the setting prefill_tile_slots) at half, the same as and twice
 * what its registry row gives, each timed in turns against the row's on a
 * bf16 prefill; a value replaces the row's only by a margin. */
#ifndef FLASHCPU_TOOLS_CLI_TUNE_BLOCKING_H
#define FLASHCPU_TOOLS_CLI_TUNE_BLOCKING_H

#include <stdbool.h>
#include <stdint.h>

#include "common/presets.h"

enum { CLI_TILE_SLOT_CANDIDATES = 3 };

typedef struct cli_blocking_race {
  bool ran;
  char kernel[96];   /* the prefill kernel the race ran */
  int64_t row_slots; /* its row's slots per tile */
  int64_t slots[CLI_TILE_SLOT_CANDIDATES];
  double ratios[CLI_TILE_SLOT_CANDIDATES]; /* median time over the row's */
  int winner; /* index into slots; the row's value is index 1 */
  int64_t prefill_length;
} cli_blocking_race;

/* A value replaces the row's only when its median ratio is below this. */
#define CLI_BLOCKING_WIN_BELOW 0.97

/* Runs the race with the settings the tune chose so far (the prefill unit;
 * may be NULL); 0, or -1 with a message on stderr. */
int cli_tune_blocking_race(const toolkit_preset *preset, bool quick,
                           const char *settings, cli_blocking_race *race);

#endif
