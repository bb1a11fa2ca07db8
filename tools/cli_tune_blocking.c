/* `flashcpu tune`'s blocking race (cli_tune_blocking.h). The row's value
 * is read from flashcpu_context_describe's kernel line, so that the race
 * follows the registry without a rebuild. */
#include "cli_tune_blocking.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_turns.h"
#include "common/workload.h"

static flashcpu_context *create(const char *settings, int64_t slots) {
  char text[256];
  snprintf(text, sizeof text, "%s%sprefill_tile_slots = %lld",
           settings ? settings : "", settings ? "; " : "", (long long)slots);
  flashcpu_context_options options;
  flashcpu_context_options_init(&options);
  options.settings = text;
  flashcpu_context *ctx = NULL;
  if (flashcpu_context_create(&options, &ctx) != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu tune: %s: %s\n", text, flashcpu_last_error(NULL));
    return NULL;
  }
  return ctx;
}

/* The slots per tile describe gives kernel on ctx, or 0. */
static int64_t described_slots(flashcpu_context *ctx, const char *kernel) {
  static char text[8192];
  flashcpu_context_describe(ctx, text, sizeof text);
  char key[128];
  snprintf(key, sizeof key, "%s (tile slots ", kernel);
  const char *at = strstr(text, key);
  return at ? strtoll(at + strlen(key), NULL, 10) : 0;
}

int cli_tune_blocking_race(const toolkit_preset *preset, bool quick,
                           const char *settings, cli_blocking_race *race) {
  *race = (cli_blocking_race){.ran = false, .winner = 1};
  race->prefill_length =
      quick ? 512 : 2048; /* quick: the tests' sanitized builds */
  toolkit_workload_spec spec = toolkit_workload_spec_make(
      preset, TOOLKIT_PHASE_PREFILL, race->prefill_length, race->prefill_length,
      FLASHCPU_DTYPE_BF16);
  spec.layers = 1;
  toolkit_workload workload;
  char error[256];
  if (toolkit_workload_build(&spec, &workload, error, sizeof error) != 0) {
    fprintf(stderr, "flashcpu tune: blocking race prefill: %s\n", error);
    return -1;
  }
  int failed = 0;
  flashcpu_context *base = create(settings, 0);
  if (!base) failed = 1;
  /* One call names the prefill kernel and its row's slots. */
  if (!failed &&
      toolkit_workload_call(base, &workload, NULL, 0) != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu tune: blocking race: %s\n",
            flashcpu_last_error(base));
    failed = 1;
  }
  if (!failed) {
    snprintf(race->kernel, sizeof race->kernel, "%s",
             flashcpu_context_last_kernels(base));
    race->row_slots = described_slots(base, race->kernel);
  }
  /* A kernel without slots to halve has no race: not a failure. */
  if (!failed && race->row_slots >= 32) {
    race->slots[0] = race->row_slots / 2;
    race->slots[1] = race->row_slots;
    race->slots[2] = race->row_slots * 2;
    race->ratios[1] = 1.0;
    double best = CLI_BLOCKING_WIN_BELOW;
    for (int i = 0; i < CLI_TILE_SLOT_CANDIDATES && !failed; i++) {
      if (i == 1) continue;
      flashcpu_context *ctx = create(settings, race->slots[i]);
      if (!ctx) {
        failed = 1;
        break;
      }
      const cli_turn_side sides[2] = {{base, NULL, NULL}, {ctx, NULL, NULL}};
      cli_timing timings[2];
      if (cli_time_in_turns(sides, &workload, quick ? 10 : 20, timings,
                            &race->ratios[i]) != FLASHCPU_OK) {
        fprintf(stderr, "flashcpu tune: blocking race: %s / %s\n",
                flashcpu_last_error(base), flashcpu_last_error(ctx));
        failed = 1;
      } else if (race->ratios[i] < best) {
        best = race->ratios[i];
        race->winner = i;
      }
      flashcpu_context_destroy(ctx);
    }
    race->ran = !failed;
  }
  flashcpu_context_destroy(base);
  toolkit_workload_free(&workload);
  return failed ? -1 : 0;
}
