#include "cli_turns.h"

#include <math.h>
#include <stdlib.h>

#include "common/timer.h"

enum { BURST_CALLS = 5 };
/* Long enough for the idle workers of the other context to stop spinning
 * and yielding, and sleep. */
static const double PAUSE_SECONDS = 0.03;

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void cli_summarize(double *seconds, int reps, cli_timing *result) {
  qsort(seconds, (size_t)reps, sizeof(double), compare_doubles);
  result->reps = reps;
  result->min = seconds[0];
  result->max = seconds[reps - 1];
  result->median = reps % 2 ? seconds[reps / 2]
                            : 0.5 * (seconds[reps / 2 - 1] + seconds[reps / 2]);
  result->p90 = seconds[(int)ceil(0.90 * reps) - 1];
  result->p99 = seconds[(int)ceil(0.99 * reps) - 1];
}

static flashcpu_status side_call(const cli_turn_side *side,
                                 const toolkit_workload *workload, int layer,
                                 double *seconds) {
  const double start = toolkit_now_seconds();
  const flashcpu_status status = toolkit_workload_call(
      side->ctx, side->workload ? side->workload : workload, side->plan, layer);
  *seconds = toolkit_now_seconds() - start;
  return status;
}

flashcpu_status cli_time_in_turns(const cli_turn_side sides[2],
                                  const toolkit_workload *workload, int reps,
                                  cli_timing results[2], double *per_turn) {
  const int turns = (reps + BURST_CALLS - 1) / BURST_CALLS;
  /* each side's calls, then each side's burst medians, then the ratios */
  double *seconds =
      malloc((2 * (size_t)reps + 3 * (size_t)turns) * sizeof(double));
  if (!seconds) return FLASHCPU_ERROR_OUT_OF_MEMORY;
  double *bursts = seconds + 2 * (size_t)reps, *ratios = bursts + 2 * turns;
  double burst[BURST_CALLS];
  int done[2] = {0, 0}, layer = 0;
  flashcpu_status status = FLASHCPU_OK;
  for (int turn = 0; turn < turns && status == FLASHCPU_OK; turn++) {
    for (int order = 0; order < 2 && status == FLASHCPU_OK; order++) {
      const int s = turn % 2 ? 1 - order : order;
      toolkit_sleep_seconds(PAUSE_SECONDS);
      double untimed;
      status = side_call(&sides[s], workload, layer++, &untimed);
      int calls = 0;
      for (; calls < BURST_CALLS && done[s] < reps && status == FLASHCPU_OK;
           calls++) {
        status = side_call(&sides[s], workload, layer++, &burst[calls]);
        seconds[(size_t)s * (size_t)reps + (size_t)done[s]++] = burst[calls];
      }
      cli_timing of_burst;
      if (calls > 0) cli_summarize(burst, calls, &of_burst);
      bursts[s * turns + turn] = calls > 0 ? of_burst.median : 0.0;
    }
  }
  if (status == FLASHCPU_OK) {
    for (int turn = 0; turn < turns; turn++)
      ratios[turn] = bursts[turns + turn] / bursts[turn];
    cli_timing of_ratios;
    cli_summarize(ratios, turns, &of_ratios);
    *per_turn = of_ratios.median;
    cli_summarize(seconds, reps, &results[0]);
    cli_summarize(seconds + reps, reps, &results[1]);
  }
  free(seconds);
  return status;
}
