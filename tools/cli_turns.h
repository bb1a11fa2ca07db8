/* `flashcpu run --against-tune`: the timed calls and the same workload on
 * a second context (a tune file's settings) in alternating bursts, so that
 * a host whose speed drifts moves both alike. */
#ifndef FLASHCPU_TOOLS_CLI_TURNS_H
#define FLASHCPU_TOOLS_CLI_TURNS_H

#include "common/workload.h"
#include "flashcpu/flashcpu.h"

enum { CLI_TURN_DEFAULT_REPS = 30 }; /* each side's, where --reps is 0 */

typedef struct cli_timing {
  int reps;
  double median, min, max; /* seconds */
  double p90, p99;         /* nearest-rank percentiles, seconds */
  int last_layer;          /* the layer whose result out holds */
} cli_timing;

/* The timing of seconds[0..reps) (sorted in place). */
void cli_summarize(double *seconds, int reps, cli_timing *result);

/* One side: the workload's call on ctx with plan; its own workload, or
 * NULL for the one both sides share. */
typedef struct cli_turn_side {
  flashcpu_context *ctx;
  const flashcpu_plan *plan;
  const toolkit_workload *workload;
} cli_turn_side;

/* Sides 0 and 1 in turns until each has `reps` timed calls: per turn, a
 * pause (the other side's idle threads fall asleep), one untimed call
 * (it wakes this side's), then up to 5 timed calls; the calls walk one
 * sequence of KV layers, and the side that goes first alternates from
 * turn to turn (the first side would otherwise always follow the pause
 * after the second). results[s]: side s's timing; *per_turn: the median
 * over turns of side 1's burst median over side 0's. */
flashcpu_status cli_time_in_turns(const cli_turn_side sides[2],
                                  const toolkit_workload *workload, int reps,
                                  cli_timing results[2], double *per_turn);

#endif
