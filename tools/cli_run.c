/* `flashcpu run`: time model-shaped attention calls, check sampled rows,
 * report the fraction of the measured ceiling that binds. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_turns.h"
#include "common/ceilings.h"
#include "common/cpu_info.h"
#include "common/timer.h"
#include "common/workload.h"
#include "output_check.h"

enum {
  WARMUP_CALLS = 2, /* the second only when the first was quick */
  AUTO_MIN_REPS = 5,
  AUTO_MAX_REPS = 1000,
  DEFAULT_DECODE_KV = 8192,
  DEFAULT_PREFILL_KV = 2048,
  DEFAULT_VERIFY_ROWS = 8,
  DEFAULT_SERVE_KV = 32768,
  DEFAULT_SERVE_ROWS = 512,
  DEFAULT_SERVE_BATCH = 32
};
static const double AUTO_SECONDS = 1.0;
static const double QUICK_CALL_SECONDS = 0.1;
static const uint64_t CHECK_SEED = 0xc4ec5eedull;

typedef cli_timing timing;

static toolkit_workload_spec make_spec(const run_options *options,
                                       toolkit_phase phase) {
  const bool serve = phase == TOOLKIT_PHASE_SERVE;
  int64_t kv = options->kv;
  if (kv == 0)
    kv = phase == TOOLKIT_PHASE_PREFILL ? DEFAULT_PREFILL_KV
         : serve                        ? DEFAULT_SERVE_KV
                                        : DEFAULT_DECODE_KV;
  int64_t rows = options->rows;
  if (rows == 0)
    rows = phase == TOOLKIT_PHASE_DECODE   ? 1
           : phase == TOOLKIT_PHASE_VERIFY ? DEFAULT_VERIFY_ROWS
           : serve                         ? DEFAULT_SERVE_ROWS
                                           : kv;
  toolkit_workload_spec spec = toolkit_workload_spec_make(
      options->preset, phase, rows, kv, options->q_dtype);
  spec.batch = options->batch > 0 ? options->batch
               : serve            ? DEFAULT_SERVE_BATCH
                                  : 1;
  if (options->page_size >= 0) spec.page_size = options->page_size;
  spec.prefix_rows = options->prefix;
  spec.shortest_kv = options->shortest;
  spec.kv_dtype = options->kv_dtype;
  spec.out_dtype = options->out_dtype;
  if (options->causal >= 0) spec.causal = options->causal == 1;
  if (options->window_set) {
    spec.window_left = options->window_left;
    spec.window_right = options->window_right;
  }
  if (options->softcap_set) spec.softcap = options->softcap;
  spec.layers = options->layers;
  return spec;
}

static void print_case(const toolkit_workload *workload) {
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  char layers_size[32];
  toolkit_format_bytes((uint64_t)workload->layer_count * 2 *
                           (workload->kv_bytes + workload->chunk_kv_bytes),
                       layers_size, sizeof layers_size);
  if (spec->phase == TOOLKIT_PHASE_SERVE)
    printf("\nserve %s: %lld decode requests (kv %lld to %lld) and a prefill "
           "chunk of %lld rows onto %lld cached keys, heads %lld/%lld, "
           "head_dim %lld, q/kv/out %s/%s/%s",
           preset->name, (long long)spec->batch,
           (long long)workload->seq_lens_kv[0],
           (long long)workload->seq_lens_kv[spec->batch - 1],
           (long long)spec->q_rows, (long long)spec->prefix_rows,
           (long long)preset->q_heads, (long long)preset->kv_heads,
           (long long)preset->head_dim, flashcpu_dtype_name(spec->q_dtype),
           flashcpu_dtype_name(spec->kv_dtype),
           flashcpu_dtype_name(spec->out_dtype));
  else {
    /* A batch of mixed lengths: its shortest and longest. */
    char kv[48];
    if (workload->kv_lengths)
      snprintf(kv, sizeof kv, "%lld to %lld",
               (long long)toolkit_workload_kv_length(workload, 0),
               (long long)spec->kv_rows);
    else
      snprintf(kv, sizeof kv, "%lld", (long long)spec->kv_rows);
    printf("\n%s %s: batch %lld, rows %lld, kv %s, heads %lld/%lld, "
           "head_dim %lld, q/kv/out %s/%s/%s",
           toolkit_phase_name(spec->phase), preset->name,
           (long long)spec->batch, (long long)spec->q_rows, kv,
           (long long)preset->q_heads, (long long)preset->kv_heads,
           (long long)preset->head_dim, flashcpu_dtype_name(spec->q_dtype),
           flashcpu_dtype_name(spec->kv_dtype),
           flashcpu_dtype_name(spec->out_dtype));
  }
  printf("%s", spec->causal ? ", causal" : ", not causal");
  if (spec->window_left >= 0 || spec->window_right >= 0)
    printf(", window %lld,%lld", (long long)spec->window_left,
           (long long)spec->window_right);
  if (spec->softcap > 0.0f) printf(", softcap %g", (double)spec->softcap);
  if (spec->tree_mask)
    printf(", tree mask over the newest %lld keys", (long long)spec->q_rows);
  printf("\n  kv caches  %d rotated, %s in all", workload->layer_count,
         layers_size);
  if (spec->page_size > 0)
    printf(", pages of %lld tokens (%lld a layer) in a random order",
           (long long)spec->page_size, (long long)workload->num_pages);
  printf("\n");
}

/* Warm-up, then timed calls, each on the next KV layer (after idle_us of
 * sleep where asked, with flashcpu_context_wake wake_ahead_us before the
 * call). */
static flashcpu_status time_calls(flashcpu_context *ctx,
                                  const toolkit_workload *workload,
                                  const flashcpu_plan *plan, int requested_reps,
                                  int idle_us, int wake_ahead_us,
                                  timing *result) {
  const int capacity = requested_reps > 0 ? requested_reps : AUTO_MAX_REPS;
  double *seconds = malloc((size_t)capacity * sizeof(double));
  if (!seconds) return FLASHCPU_ERROR_OUT_OF_MEMORY;
  flashcpu_status status = FLASHCPU_OK;
  int layer = 0, reps = 0;
  for (int i = 0; i < WARMUP_CALLS && status == FLASHCPU_OK; i++) {
    double start = toolkit_now_seconds();
    status = toolkit_workload_call(ctx, workload, plan, layer++);
    if (toolkit_now_seconds() - start > QUICK_CALL_SECONDS) break;
  }
  double total = 0.0;
  while (status == FLASHCPU_OK && reps < capacity) {
    if (requested_reps == 0 && reps >= AUTO_MIN_REPS && total >= AUTO_SECONDS)
      break;
    result->last_layer = layer % workload->layer_count;
    if (idle_us > wake_ahead_us)
      toolkit_sleep_seconds((idle_us - wake_ahead_us) * 1e-6);
    if (wake_ahead_us > 0) {
      flashcpu_context_wake(ctx);
      toolkit_sleep_seconds(wake_ahead_us * 1e-6);
    }
    double start = toolkit_now_seconds();
    status = toolkit_workload_call(ctx, workload, plan, layer++);
    seconds[reps] = toolkit_now_seconds() - start;
    total += seconds[reps++];
  }
  if (status == FLASHCPU_OK) cli_summarize(seconds, reps, result);
  free(seconds);
  return status;
}

static void format_time(double seconds, char *buffer, size_t size) {
  if (seconds >= 1.0)
    snprintf(buffer, size, "%.3f s", seconds);
  else if (seconds >= 1e-3)
    snprintf(buffer, size, "%.3f ms", seconds * 1e3);
  else
    snprintf(buffer, size, "%.1f us", seconds * 1e6);
}

/* kernels: what the timed calls ran (flashcpu_context_last_kernels). */
static void print_timing(const toolkit_workload *workload, const timing *t,
                         const toolkit_ceilings *ceilings,
                         const char *kernels) {
  char median[32], min[32], max[32];
  format_time(t->median, median, sizeof median);
  format_time(t->min, min, sizeof min);
  format_time(t->max, max, sizeof max);
  printf("  time       median %s, min %s, max %s (%d reps)\n", median, min, max,
         t->reps);
  if (t->reps >= 20) { /* the tail: calls that waited on a late thread */
    char p90[32], p99[32];
    format_time(t->p90, p90, sizeof p90);
    format_time(t->p99, p99, sizeof p99);
    printf("  tail       p90 %s, p99 %s\n", p90, p99);
  }
  const double gbps = workload->bytes_per_call / t->median * 1e-9;
  const double gflops = workload->flops_per_call / t->median * 1e-9;
  printf("  rate       %.3g GB/s (%.3g%% of read), %.3g GFLOP/s (%.3g%% of "
         "fma)\n",
         gbps, 100.0 * gbps / ceilings->read_gbps, gflops,
         100.0 * gflops / ceilings->fma_gflops);
  const bool read_bound =
      toolkit_workload_bound(workload, ceilings) == TOOLKIT_BOUND_READ;
  printf("  kernels    %s\n", kernels);
  printf("  ceiling    %.3g%% of the %s, which binds %s\n",
         toolkit_ceiling_percent(workload, ceilings, t->median, kernels),
         read_bound ? "read bandwidth"
                    : toolkit_unit_name(toolkit_unit_of_kernels(kernels)),
         toolkit_phase_name(workload->spec.phase));
}

static bool print_check(const toolkit_workload *workload, int layer, int rows) {
  if (rows == 0) {
    printf("  check      skipped (--check-rows 0)\n");
    return true;
  }
  output_check_result check =
      output_check_rows(workload, layer, rows, CHECK_SEED);
  printf("  check      %s  %d rows vs float64 oracle, max error %.2e "
         "(tolerance %.2e)",
         check.passed ? "PASS" : "FAIL", check.rows_checked, check.max_error,
         check.max_tolerance);
  if (!check.passed)
    printf(", worst error %.3gx its tolerance", check.worst_ratio);
  printf("\n");
  return check.passed;
}

/* The plan (made once, as an engine makes one per step for every layer):
 * its time and what it runs. */
static flashcpu_status make_plan(flashcpu_context *ctx,
                                 const toolkit_workload *workload,
                                 flashcpu_plan **plan) {
  const double start = toolkit_now_seconds();
  flashcpu_status status = toolkit_workload_plan(ctx, workload, plan);
  const double seconds = toolkit_now_seconds() - start;
  if (status != FLASHCPU_OK || !*plan) return status;
  char took[32], text[1024];
  format_time(seconds, took, sizeof took);
  flashcpu_plan_describe(*plan, text, sizeof text);
  printf("  plan       %s, made once per step for every layer\n", took);
  /* Its lines after the first (which repeats the shape): one per kernel
   * family, indented by two. */
  const char *line = strchr(text, '\n');
  while (line && line[1]) {
    const char *next = strchr(line + 1, '\n');
    const int length = (int)(next ? next - line - 1 : (long)strlen(line + 1));
    printf("           %.*s\n", length, line + 1);
    line = next;
  }
  return FLASHCPU_OK;
}

/* The second context of a comparison in turns, against the timed calls,
 * and its own check (after a call on layer 0). */
static bool print_second_side(const run_options *options,
                              const toolkit_workload *workload,
                              const timing *first, const cli_turn_side *other,
                              const timing *second, double per_turn) {
  char median[32], min[32], max[32];
  format_time(second->median, median, sizeof median);
  format_time(second->min, min, sizeof min);
  format_time(second->max, max, sizeof max);
  printf("  against    %s: median %s, min %s, max %s (%d reps, in turns "
         "with the above): %.3f x its median time (%.3f per turn), %.3f x "
         "its min\n",
         options->against_tune, median, min, max, second->reps,
         second->median / first->median, per_turn, second->min / first->min);
  printf("             kernels %s\n",
         flashcpu_context_last_kernels(other->ctx));
  const flashcpu_status status =
      toolkit_workload_call(other->ctx, workload, other->plan, 0);
  if (status != FLASHCPU_OK) {
    fprintf(stderr,
            "flashcpu run: the --against-tune context failed: %s: "
            "%s\n",
            flashcpu_status_name(status), flashcpu_last_error(other->ctx));
    return false;
  }
  return print_check(workload, 0, options->check_rows);
}

/* Builds, times and checks one workload; *median gets its median time.
 * With other (its plan made here), the calls are timed in turns with it. */
static int measure(flashcpu_context *ctx, const run_options *options,
                   const toolkit_workload_spec *spec,
                   const toolkit_ceilings *ceilings, bool contiguous_twin,
                   cli_turn_side *other, double *median) {
  toolkit_workload workload;
  char error[256];
  if (toolkit_workload_build(spec, &workload, error, sizeof error) != 0) {
    fprintf(stderr, "flashcpu run: %s workload: %s\n",
            toolkit_phase_name(spec->phase), error);
    return CLI_EXIT_FAILURE;
  }
  if (contiguous_twin) {
    char size[32];
    toolkit_format_bytes((uint64_t)workload.layer_count *
                             (uint64_t)workload.layer_bytes,
                         size, sizeof size);
    printf("  contiguous the same step on contiguous K/V: %d kv caches "
           "rotated, %s in all\n",
           workload.layer_count, size);
  } else {
    print_case(&workload);
  }
  if (options->idle_us > 0)
    printf("  idle       %d us of sleep before each timed call\n",
           options->idle_us);
  if (options->wake_ahead_us > 0)
    printf("  wake       flashcpu_context_wake %d us before each timed call\n",
           options->wake_ahead_us);
  fflush(stdout);
  int exit_code = CLI_EXIT_OK;
  flashcpu_plan *plan = NULL, *other_plan = NULL;
  flashcpu_status status = make_plan(ctx, &workload, &plan);
  flashcpu_context *failed = ctx;
  timing measured = {0}, second = measured;
  double per_turn = 0.0;
  if (status == FLASHCPU_OK && other) {
    failed = other->ctx;
    status = toolkit_workload_plan(other->ctx, &workload, &other_plan);
    other->plan = other_plan;
    if (status == FLASHCPU_OK) {
      failed = ctx;
      const cli_turn_side sides[2] = {{ctx, plan, NULL}, *other};
      timing results[2];
      status = cli_time_in_turns(sides, &workload,
                                 options->reps > 0 ? options->reps
                                                   : CLI_TURN_DEFAULT_REPS,
                                 results, &per_turn);
      measured = results[0];
      second = results[1];
    }
    /* The output checked is that of a call on layer 0. */
    if (status == FLASHCPU_OK)
      status = toolkit_workload_call(ctx, &workload, plan, 0);
    measured.last_layer = 0;
  } else if (status == FLASHCPU_OK) {
    status = time_calls(ctx, &workload, plan, options->reps, options->idle_us,
                        options->wake_ahead_us, &measured);
  }
  if (status != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu run: %s failed: %s: %s\n",
            spec->page_size > 0 ? "the paged step" : "flashcpu_attention",
            flashcpu_status_name(status), flashcpu_last_error(failed));
    exit_code = CLI_EXIT_FAILURE;
  } else {
    print_timing(&workload, &measured, ceilings,
                 flashcpu_context_last_kernels(ctx));
    if (!print_check(&workload, measured.last_layer, options->check_rows))
      exit_code = CLI_EXIT_FAILURE;
    *median = measured.median;
    if (other && !print_second_side(options, &workload, &measured, other,
                                    &second, per_turn))
      exit_code = CLI_EXIT_FAILURE;
  }
  if (other) other->plan = NULL;
  flashcpu_plan_destroy(other_plan);
  flashcpu_plan_destroy(plan);
  toolkit_workload_free(&workload);
  return exit_code;
}

/* Whether K/V of this dtype carry codes (I8 to Q8_0). */
static bool kv_holds_codes(flashcpu_dtype dtype) {
  return dtype >= FLASHCPU_DTYPE_I8 && dtype <= FLASHCPU_DTYPE_Q8_0;
}

/* A paged case and the same case on contiguous K/V timed in turns (bursts
 * of calls, the side that goes first alternating), so that a host whose
 * speed drifts, and whatever the first calls leave behind, move both
 * alike; both workloads are held together for it. */
static int run_paged_in_turns(flashcpu_context *ctx, const run_options *options,
                              toolkit_workload_spec *spec,
                              const toolkit_ceilings *ceilings) {
  toolkit_workload paged, contiguous;
  memset(&contiguous, 0, sizeof contiguous);
  char error[256];
  if (toolkit_workload_build(spec, &paged, error, sizeof error) != 0) {
    fprintf(stderr, "flashcpu run: %s workload: %s\n",
            toolkit_phase_name(spec->phase), error);
    return CLI_EXIT_FAILURE;
  }
  spec->page_size = 0;
  if (toolkit_workload_build(spec, &contiguous, error, sizeof error) != 0) {
    fprintf(stderr, "flashcpu run: %s workload on contiguous K/V: %s\n",
            toolkit_phase_name(spec->phase), error);
    toolkit_workload_free(&paged);
    return CLI_EXIT_FAILURE;
  }
  print_case(&paged);
  char size[32];
  toolkit_format_bytes((uint64_t)contiguous.layer_count *
                           (uint64_t)contiguous.layer_bytes,
                       size, sizeof size);
  printf("  contiguous the same step on contiguous K/V: %d kv caches "
         "rotated, %s in all; the two timed in turns\n",
         contiguous.layer_count, size);
  fflush(stdout);
  int exit_code = CLI_EXIT_OK;
  flashcpu_plan *plan = NULL;
  flashcpu_status status = make_plan(ctx, &paged, &plan);
  timing results[2] = {{0}, {0}};
  double per_turn = 0.0;
  if (status == FLASHCPU_OK) {
    const cli_turn_side sides[2] = {{ctx, plan, &paged},
                                    {ctx, NULL, &contiguous}};
    status = cli_time_in_turns(sides, &paged,
                               options->reps > 0 ? options->reps
                                                 : CLI_TURN_DEFAULT_REPS,
                               results, &per_turn);
  }
  /* The outputs checked are those of calls on layer 0. */
  const toolkit_workload *workloads[2] = {&paged, &contiguous};
  const flashcpu_plan *plans[2] = {plan, NULL};
  for (int side = 0; side < 2 && status == FLASHCPU_OK; side++) {
    if (side == 1) printf("  contiguous\n");
    status = toolkit_workload_call(ctx, workloads[side], plans[side], 0);
    if (status != FLASHCPU_OK) break;
    print_timing(workloads[side], &results[side], ceilings,
                 flashcpu_context_last_kernels(ctx));
    if (!print_check(workloads[side], 0, options->check_rows))
      exit_code = CLI_EXIT_FAILURE;
  }
  if (status != FLASHCPU_OK) {
    fprintf(stderr,
            "flashcpu run: the paged step or its contiguous twin "
            "failed: %s: %s\n",
            flashcpu_status_name(status), flashcpu_last_error(ctx));
    exit_code = CLI_EXIT_FAILURE;
  } else {
    printf("  paged      %.3f x the time on contiguous K/V (medians; %.3f "
           "per turn)\n",
           results[0].median / results[1].median, 1.0 / per_turn);
  }
  flashcpu_plan_destroy(plan);
  toolkit_workload_free(&contiguous);
  toolkit_workload_free(&paged);
  return exit_code;
}

/* A paged case is followed by the same case on contiguous K/V: in turns
 * with it where the calls are back to back; else (idle time before each
 * call, or --against-tune's turns) after it, built once the paged one is
 * freed. */
static int run_case(flashcpu_context *ctx, const run_options *options,
                    toolkit_phase phase, const toolkit_ceilings *ceilings,
                    cli_turn_side *other) {
  toolkit_workload_spec spec = make_spec(options, phase);
  const bool has_twin =
      spec.page_size > 0 &&
      !(spec.phase == TOOLKIT_PHASE_SERVE && kv_holds_codes(spec.kv_dtype));
  if (has_twin && !other && options->idle_us == 0)
    return run_paged_in_turns(ctx, options, &spec, ceilings);
  double paged = 0.0, contiguous = 0.0;
  int exit_code = measure(ctx, options, &spec, ceilings, false, other, &paged);
  if (exit_code != CLI_EXIT_OK || spec.page_size == 0) return exit_code;
  if (!has_twin) {
    printf("  contiguous none: a serving step on quantized K/V runs on "
           "pages\n");
    return exit_code;
  }
  spec.page_size = 0;
  exit_code = measure(ctx, options, &spec, ceilings, true, other, &contiguous);
  if (exit_code == CLI_EXIT_OK)
    printf("  paged      %.3f x the time on contiguous K/V\n",
           paged / contiguous);
  return exit_code;
}

int cli_run(const run_options *options) {
  flashcpu_context_options context_options;
  flashcpu_context_options_init(&context_options);
  context_options.num_threads = options->threads;
  context_options.max_isa = options->max_isa;
  context_options.team_level = options->team_level;
  context_options.max_team_size = options->max_team;
  flashcpu_context *ctx = NULL;
  flashcpu_status status = flashcpu_context_create(&context_options, &ctx);
  if (status != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu run: flashcpu_context_create failed: %s: %s\n",
            flashcpu_status_name(status), flashcpu_last_error(NULL));
    return CLI_EXIT_FAILURE;
  }
  cli_turn_side against = {NULL, NULL, NULL};
  cli_turn_side *other_ctx = NULL;
  if (options->against_tune) {
    context_options.tune_file = options->against_tune;
    status = flashcpu_context_create(&context_options, &against.ctx);
    if (status != FLASHCPU_OK) {
      fprintf(stderr,
              "flashcpu run: flashcpu_context_create (--against-tune) "
              "failed: %s: %s\n",
              flashcpu_status_name(status), flashcpu_last_error(NULL));
      flashcpu_context_destroy(ctx);
      return CLI_EXIT_FAILURE;
    }
    other_ctx = &against;
  }
  const int threads = flashcpu_context_num_threads(ctx);
  toolkit_cpu_info info;
  toolkit_cpu_info_query(&info);
  printf("flashcpu %s on %s: %d thread%s in %d team%s, %s kernels\n",
         flashcpu_version_string(), info.model, threads,
         threads == 1 ? "" : "s", flashcpu_context_num_teams(ctx),
         flashcpu_context_num_teams(ctx) == 1 ? "" : "s",
         flashcpu_isa_name(flashcpu_context_isa(ctx)));
  toolkit_ceilings ceilings;
  if (toolkit_measure_ceilings(threads, &ceilings) != 0) {
    fprintf(stderr, "flashcpu run: cannot allocate the bandwidth buffer\n");
    flashcpu_context_destroy(against.ctx);
    flashcpu_context_destroy(ctx);
    return CLI_EXIT_FAILURE;
  }
  printf("ceilings   ");
  toolkit_print_ceilings(stdout, &ceilings);
  int exit_code = CLI_EXIT_OK;
  if (options->run_decode && run_case(ctx, options, TOOLKIT_PHASE_DECODE,
                                      &ceilings, other_ctx) != CLI_EXIT_OK)
    exit_code = CLI_EXIT_FAILURE;
  if (options->run_verify && run_case(ctx, options, TOOLKIT_PHASE_VERIFY,
                                      &ceilings, other_ctx) != CLI_EXIT_OK)
    exit_code = CLI_EXIT_FAILURE;
  if (options->run_prefill && run_case(ctx, options, TOOLKIT_PHASE_PREFILL,
                                       &ceilings, other_ctx) != CLI_EXIT_OK)
    exit_code = CLI_EXIT_FAILURE;
  if (options->run_serve && run_case(ctx, options, TOOLKIT_PHASE_SERVE,
                                     &ceilings, other_ctx) != CLI_EXIT_OK)
    exit_code = CLI_EXIT_FAILURE;
  flashcpu_context_destroy(against.ctx);
  flashcpu_context_destroy(ctx);
  return exit_code;
}
