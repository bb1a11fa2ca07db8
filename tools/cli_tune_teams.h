/* `flashcpu tune`'s team race: the team shapes this machine offers at the
 * default thread count, each timed in turns against the default shape on
 * a bf16 prefill and a bf16 decode; the fastest sets team_level and
 * max_team_size. */
#ifndef FLASHCPU_TOOLS_CLI_TUNE_TEAMS_H
#define FLASHCPU_TOOLS_CLI_TUNE_TEAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/presets.h"
#include "flashcpu/flashcpu.h"

enum { CLI_TEAM_SHAPES_MAX = 8 };

typedef struct cli_team_shape {
  flashcpu_team_level level;
  int max_team_size;
  int teams; /* at the default thread count */
  /* The medians of the per-turn ratios of this shape's time to the
   * default's (1 for the default itself). */
  double prefill_ratio, decode_ratio;
} cli_team_shape;

typedef struct cli_team_race {
  bool ran;    /* false: a single shape, nothing to choose */
  int threads; /* the default thread count */
  int count;   /* shapes[0] is the default (auto) */
  cli_team_shape shapes[CLI_TEAM_SHAPES_MAX];
  int winner; /* index into shapes */
  int64_t prefill_length, decode_kv;
} cli_team_race;

/* What the race times. settings: the bf16 prefill unit the tune chose, as
 * prefill_amx and prefill_bf16_dot entries (NULL where it chose none). */
typedef struct cli_team_race_spec {
  const toolkit_preset *preset;
  bool quick;
  int64_t prefill_length, decode_kv;
  int decode_layers; /* KV caches rotated by the decode */
  const char *settings;
} cli_team_race_spec;

/* A shape replaces the default only when the geometric mean of its two
 * ratios is below this: a margin for the noise of a shared host. */
#define CLI_TEAM_WIN_BELOW 0.97

/* Runs the race; 0, or -1 with a message on stderr. */
int cli_tune_team_race(const cli_team_race_spec *spec, cli_team_race *race);

/* The tune-file value of a team level. */
const char *cli_team_level_word(flashcpu_team_level level);

#endif
