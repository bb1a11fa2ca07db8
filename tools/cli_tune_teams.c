/* `flashcpu tune`'s team race (cli_tune_teams.h). The candidates: one team
 * per core, cores sharing an L2, and 2, 4, 8 or all cores of an L3, each
 * kept only where it gives a team count that the default and the shapes
 * before it do not. Each is timed in turns with the default shape
 * (cli_time_in_turns), so that a host whose speed drifts moves both
 * alike; the medians of the per-turn ratios decide. */
#include "cli_tune_teams.h"

#include <math.h>
#include <stdio.h>

#include "cli_turns.h"
#include "common/workload.h"

const char *cli_team_level_word(flashcpu_team_level level) {
  switch (level) {
  case FLASHCPU_TEAM_CORE:
    return "core";
  case FLASHCPU_TEAM_L2:
    return "l2";
  case FLASHCPU_TEAM_L3:
    return "l3";
  case FLASHCPU_TEAM_NUMA:
    return "numa";
  default:
    return "auto";
  }
}

static flashcpu_context *create(const cli_team_race_spec *spec,
                                flashcpu_team_level level, int max_size) {
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.team_level = level;
  options.max_team_size = max_size;
  options.settings = spec->settings;
  flashcpu_context *ctx = NULL;
  if (flashcpu_context_create(&options, &ctx) != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu tune: teams %s (at most %d): %s\n",
            cli_team_level_word(level), max_size, flashcpu_last_error(NULL));
    return NULL;
  }
  return ctx;
}

/* The medians of the per-turn ratios of ctx's time to the default's on
 * the two workloads. */
static int time_shape(flashcpu_context *base, flashcpu_context *ctx,
                      const toolkit_workload *workloads[2], int reps,
                      double ratios[2]) {
  const cli_turn_side sides[2] = {{base, NULL, NULL}, {ctx, NULL, NULL}};
  for (int w = 0; w < 2; w++) {
    cli_timing timings[2];
    const flashcpu_status status =
        cli_time_in_turns(sides, workloads[w], reps, timings, &ratios[w]);
    if (status != FLASHCPU_OK) { /* either side's call: name both */
      fprintf(stderr,
              "flashcpu tune: team race: %s (default shape: %s; "
              "this shape: %s)\n",
              flashcpu_status_name(status), flashcpu_last_error(base),
              flashcpu_last_error(ctx));
      return -1;
    }
  }
  return 0;
}

int cli_tune_team_race(const cli_team_race_spec *spec, cli_team_race *race) {
  static const struct {
    flashcpu_team_level level;
    int max_size;
  } candidates[] = {{FLASHCPU_TEAM_CORE, 0}, {FLASHCPU_TEAM_L2, 0},
                    {FLASHCPU_TEAM_L3, 2},   {FLASHCPU_TEAM_L3, 4},
                    {FLASHCPU_TEAM_L3, 8},   {FLASHCPU_TEAM_L3, 0}};
  *race = (cli_team_race){.ran = false, .winner = 0};
  race->prefill_length = spec->prefill_length;
  race->decode_kv = spec->decode_kv;
  flashcpu_context *contexts[CLI_TEAM_SHAPES_MAX] = {NULL};
  contexts[0] = create(spec, FLASHCPU_TEAM_AUTO, 0);
  if (!contexts[0]) return -1;
  race->threads = flashcpu_context_num_threads(contexts[0]);
  race->shapes[0] = (cli_team_shape){
      FLASHCPU_TEAM_AUTO, 0, flashcpu_context_num_teams(contexts[0]), 1.0, 1.0};
  race->count = 1;
  int failed = 0;
  for (size_t c = 0; c < sizeof candidates / sizeof candidates[0]; c++) {
    flashcpu_context *ctx =
        create(spec, candidates[c].level, candidates[c].max_size);
    if (!ctx) {
      failed = 1;
      break;
    }
    const int teams = flashcpu_context_num_teams(ctx);
    bool seen = false;
    for (int s = 0; s < race->count; s++)
      seen |= race->shapes[s].teams == teams;
    if (seen || race->count == CLI_TEAM_SHAPES_MAX) {
      flashcpu_context_destroy(ctx);
      continue;
    }
    contexts[race->count] = ctx;
    race->shapes[race->count++] = (cli_team_shape){
        candidates[c].level, candidates[c].max_size, teams, 1.0, 1.0};
  }
  toolkit_workload prefill, decode;
  int built = 0;
  if (!failed && race->count > 1) {
    toolkit_workload_spec p = toolkit_workload_spec_make(
        spec->preset, TOOLKIT_PHASE_PREFILL, spec->prefill_length,
        spec->prefill_length, FLASHCPU_DTYPE_BF16);
    p.layers = 1;
    toolkit_workload_spec d =
        toolkit_workload_spec_make(spec->preset, TOOLKIT_PHASE_DECODE, 1,
                                   spec->decode_kv, FLASHCPU_DTYPE_BF16);
    d.layers = spec->decode_layers;
    char error[256];
    if (toolkit_workload_build(&p, &prefill, error, sizeof error) != 0) {
      fprintf(stderr, "flashcpu tune: team race prefill: %s\n", error);
      failed = 1;
    } else {
      built = 1;
      if (toolkit_workload_build(&d, &decode, error, sizeof error) != 0) {
        fprintf(stderr, "flashcpu tune: team race decode: %s\n", error);
        failed = 1;
      } else {
        built = 2;
      }
    }
  }
  const int reps = spec->quick ? 10 : 20;
  double best = CLI_TEAM_WIN_BELOW;
  for (int s = 1; s < race->count && !failed; s++) {
    const toolkit_workload *workloads[2] = {&prefill, &decode};
    double ratios[2];
    if (time_shape(contexts[0], contexts[s], workloads, reps, ratios) != 0) {
      failed = 1;
      break;
    }
    race->shapes[s].prefill_ratio = ratios[0];
    race->shapes[s].decode_ratio = ratios[1];
    const double mean = sqrt(ratios[0] * ratios[1]);
    if (mean < best) {
      best = mean;
      race->winner = s;
    }
  }
  if (built >= 1) toolkit_workload_free(&prefill);
  if (built >= 2) toolkit_workload_free(&decode);
  for (int s = 0; s < CLI_TEAM_SHAPES_MAX; s++)
    flashcpu_context_destroy(contexts[s]);
  if (failed) return -1;
  race->ran = race->count > 1;
  return 0;
}
