/* The flashcpu command-line tool: subcommands and their options. */
#ifndef FLASHCPU_TOOLS_CLI_H
#define FLASHCPU_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/presets.h"
#include "flashcpu/flashcpu.h"

/* Exit codes: 0 success, 1 a check failed or the library returned an
 * error, 2 bad usage. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILURE = 1, CLI_EXIT_USAGE = 2 };

typedef struct run_options {
  const toolkit_preset *preset;
  bool run_decode, run_prefill, run_verify, run_serve;
  int64_t rows;      /* 0: decode 1, verify 8, prefill = kv, serve 512 */
  int64_t kv;        /* 0: decode and verify 8192, prefill 2048, serve 32768 */
  int64_t batch;     /* 0: 1, serve 32 (decode requests) */
  int64_t page_size; /* -1: contiguous K/V, serve pages of 16 tokens */
  int64_t prefix;    /* serve: keys cached before the chunk */
  int64_t shortest;  /* > 0: batch kv lengths spread from this to kv */
  flashcpu_dtype q_dtype, kv_dtype, out_dtype;
  int threads; /* 0: the library's default */
  flashcpu_isa max_isa;
  flashcpu_team_level team_level; /* AUTO: the library's choice */
  int max_team;                   /* 0: no cap */
  int causal;                     /* -1: the preset's; 0 off; 1 on */
  bool window_set;
  int64_t window_left, window_right;
  bool softcap_set;
  float softcap;
  int reps;       /* 0: at least 5, more while under a second */
  int check_rows; /* sampled rows checked against the oracle; 0: none */
  int layers;     /* KV caches rotated in decode and verify; 0: enough for
                     the LLC */
  const char *against_tune; /* a second context's tune file, timed in
                               turns with the first; NULL: none */
  int idle_us;       /* the machine idles this long before each timed call */
  int wake_ahead_us; /* flashcpu_context_wake this long before each call */
} run_options;

/* Parses `flashcpu run` arguments (argv[0] is "run"). Returns -1 when the
 * options are valid, otherwise the exit code to return (0 after --help,
 * CLI_EXIT_USAGE after an error message on stderr). */
int cli_parse_run_options(int argc, char **argv, run_options *options);
void cli_print_run_help(FILE *stream);
int cli_run(const run_options *options);

int cli_info(int argc, char **argv);
/* `flashcpu tune` (argv[0] is "tune"): measures the decode thresholds and
 * writes a tune file. Returns the exit code. */
int cli_tune(int argc, char **argv);

#endif
