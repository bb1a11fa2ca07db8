/* `flashcpu tune`: measures where the split-KV decode kernel and the
 * prefill kernel cross over on this machine, which unit runs bf16
 * prefill fastest (AMX tiles, AVX512-BF16 dot products or fp32 FMA) and
 * which team shape runs a prefill and a decode fastest (cli_tune_teams.c),
 * and writes the settings as a tune file the library reads
 * (flashcpu_context_options.tune_file or FLASHCPU_TUNE_FILE).
 *
 * Each kernel family is forced through the context option
 * splitkv_max_rows (64: split-KV for every decode shape, 0: never); both
 * run on the same workload (llama3-8b GQA, bf16, KV caches rotated past the
 * last-level cache), alternating, and the medians decide. The setting
 * depends on the shape only, never on the thread count at call time, so the
 * file holds one value, measured with the default thread count. */
#define _POSIX_C_SOURCE 200809L /* isatty, fileno, localtime_r */

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_tune_blocking.h"
#include "cli_tune_teams.h"
#include "common/cpu_info.h"
#include "common/timer.h"
#include "common/workload.h"

typedef enum kernel {
  KERNEL_SPLITKV = 0,
  KERNEL_PREFILL = 1,
  KERNEL_COUNT
} kernel;

static const char *const kernel_names[KERNEL_COUNT] = {"split-KV", "prefill"};
/* The splitkv_max_rows that forces each family for decode shapes. */
static const char *const kernel_forcing[KERNEL_COUNT] = {
    "splitkv_max_rows = 64", "splitkv_max_rows = 0"};

typedef struct tune_options {
  bool quick;
  const char *out;
  const toolkit_preset *preset;
  uint64_t llc_bytes; /* the last-level cache, summed; 0: unknown */
} tune_options;

/* KV caches to rotate: past the last-level cache this many times (fewer
 * than `flashcpu run` rotates, so that a quick tune allocates little). */
enum { ROTATE_CACHE_MULTIPLE = 3, ROTATE_MIN_LAYERS = 2 };
/* --quick rotates at most this much: on a host that reports a large
 * last-level cache (1 GiB on some virtual machines), filling 3x that for
 * every measured shape took most of a minute. */
#define QUICK_ROTATE_BYTES ((uint64_t)256 << 20)

typedef struct sweep {
  const char *key;  /* the threshold it sets */
  const char *what; /* for the progress line */
  kernel a, b;      /* a: the challenger, b: the default */
  int64_t values[12];
  int count;
  int64_t batch, rows, kv; /* the fixed ones; the swept one is ignored */
  char axis;               /* 'k' kv, 'b' batch, 'r' rows */
  double seconds[12][2];   /* medians of a and b */
  int64_t chosen;
} sweep;

typedef struct progress {
  int done, total;
  double start;
  bool tty;
} progress;

/* The summary, kept to print and to write as the file's comments. */
typedef struct report {
  char text[16384];
  size_t length;
} report;

/* The bf16 prefill race: every runnable bf16 prefill kernel of the ISA,
 * forced in its own context, on one causal prefill; the fastest sets
 * prefill_amx and prefill_bf16_dot. By measured rate, not by vendor. */
enum { UNIT_AMX, UNIT_DOT, UNIT_FMA, UNIT_COUNT };
static const char *const unit_names[UNIT_COUNT] = {
    "AMX tiles", "AVX512-BF16 dots", "fp32 FMA"};

typedef struct unit_race {
  bool ran;
  int64_t length;
  const char *kernels[UNIT_COUNT]; /* NULL: not runnable here */
  double seconds[UNIT_COUNT];
  int winner;
} unit_race;

static void say(report *r, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void say(report *r, const char *format, ...) {
  va_list args;
  va_start(args, format);
  if (r->length < sizeof r->text) {
    int n = vsnprintf(r->text + r->length, sizeof r->text - r->length, format,
                      args);
    if (n > 0) r->length += (size_t)n;
    if (r->length >= sizeof r->text) r->length = sizeof r->text - 1;
  }
  va_end(args);
}

static void print_help(FILE *stream) {
  fprintf(
      stream,
      "usage: flashcpu tune [--quick] [--out PATH]\n"
      "\n"
      "Measures, on this machine, up to how many query rows the split-KV "
      "decode\n"
      "kernel beats the prefill kernel, which unit runs bf16 prefill fastest "
      "and\n"
      "which team shape runs a prefill and a decode fastest, and writes those\n"
      "settings as a tune file:\n"
      "  splitkv_max_rows   split-KV vs the prefill kernel by query rows\n"
      "  prefill_amx, prefill_bf16_dot\n"
      "                     AMX tiles, AVX512-BF16 dots or fp32 FMA (where "
      "the\n"
      "                     CPU has more than one)\n"
      "  team_level, max_team_size\n"
      "                     the threads sharing each tile's K/V: one per "
      "core,\n"
      "                     the cores of an L2, or 2, 4, 8 or all cores of an\n"
      "                     L3 (where these differ), in turns with the "
      "default\n"
      "  prefill_tile_slots the prefill kernel's query slots per tile: half,\n"
      "                     the same as or twice its registry row's\n"
      "on the llama3-8b shape (GQA 32/8, head_dim 128), bf16, with the KV "
      "caches\n"
      "rotated past the last-level cache. Progress goes to stderr, the "
      "summary\n"
      "(the setting with the timings behind it) to stdout and, as comments,\n"
      "into the file. Use the file with flashcpu_context_options.tune_file or\n"
      "FLASHCPU_TUNE_FILE=PATH. Run it with the thread count your engine uses\n"
      "(OMP_NUM_THREADS; default: all cores) on an otherwise idle machine.\n"
      "\n"
      "  --quick       fewer shapes and repetitions, shorter prefills, and at\n"
      "                most 256 MiB of KV rotated (so part may come from a "
      "large\n"
      "                cache): seconds\n"
      "  --out PATH    the tune file to write (default ./flashcpu.tune)\n"
      "  --preset NAME the model shape (default llama3-8b; see flashcpu run\n"
      "                --help)\n"
      "  -h, --help    this help\n");
}

static int parse(int argc, char **argv, tune_options *options) {
  options->quick = false;
  options->out = "flashcpu.tune";
  options->preset = toolkit_preset_find("llama3-8b");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      print_help(stdout);
      return CLI_EXIT_OK;
    }
    if (strcmp(arg, "--quick") == 0) {
      options->quick = true;
      continue;
    }
    const char *value = NULL;
    const char *names[] = {"--out", "--preset"};
    int which = -1;
    for (int n = 0; n < 2; n++) {
      size_t length = strlen(names[n]);
      if (strcmp(arg, names[n]) == 0) {
        which = n;
        if (i + 1 < argc) value = argv[++i];
      } else if (strncmp(arg, names[n], length) == 0 && arg[length] == '=') {
        which = n;
        value = arg + length + 1;
      }
    }
    if (which < 0) {
      fprintf(stderr,
              "flashcpu tune: unknown option '%s'\n(see flashcpu tune "
              "--help)\n",
              arg);
      return CLI_EXIT_USAGE;
    }
    if (!value || !*value) {
      fprintf(stderr, "flashcpu tune: %s needs a value\n", names[which]);
      return CLI_EXIT_USAGE;
    }
    if (which == 0) {
      options->out = value;
    } else if (!(options->preset = toolkit_preset_find(value))) {
      fprintf(stderr,
              "flashcpu tune: no preset '%s' (see flashcpu run "
              "--help)\n",
              value);
      return CLI_EXIT_USAGE;
    }
  }
  return -1;
}

static void show_progress(progress *p, const char *what) {
  const double elapsed = toolkit_now_seconds() - p->start;
  if (p->tty)
    fprintf(stderr, "\r\033[K[%2d/%d %5.1f s] %s", p->done + 1, p->total,
            elapsed, what);
  else
    fprintf(stderr, "[%2d/%d %5.1f s] %s\n", p->done + 1, p->total, elapsed,
            what);
  fflush(stderr);
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { MAX_SAMPLES = 400 };

/* Times kernels a and b on the workload in alternating rounds; writes
 * their median seconds per call. */
static flashcpu_status time_pair(flashcpu_context *contexts[KERNEL_COUNT],
                                 kernel a, kernel b,
                                 const toolkit_workload *workload, bool quick,
                                 double medians[2]) {
  const int rounds = quick ? 2 : 3;
  const double round_seconds = quick ? 0.06 : 0.2;
  const int min_reps = quick ? 3 : 5;
  static double samples[2][MAX_SAMPLES];
  int counts[2] = {0, 0};
  int layer = 0;
  const kernel which[2] = {a, b};
  for (int round = 0; round < rounds; round++) {
    for (int k = 0; k < 2; k++) {
      flashcpu_context *ctx = contexts[which[k]];
      flashcpu_tensor q, kt, v, out;
      /* A warm-up call per round: the other context's threads slept. */
      toolkit_workload_tensors(workload, layer++, &q, &kt, &v, &out);
      flashcpu_status status =
          flashcpu_attention(ctx, &q, &kt, &v, &out, NULL, &workload->params);
      if (status != FLASHCPU_OK) return status;
      double total = 0.0;
      for (int rep = 0;
           counts[k] < MAX_SAMPLES && (rep < min_reps || total < round_seconds);
           rep++) {
        toolkit_workload_tensors(workload, layer++, &q, &kt, &v, &out);
        double begin = toolkit_now_seconds();
        status =
            flashcpu_attention(ctx, &q, &kt, &v, &out, NULL, &workload->params);
        double seconds = toolkit_now_seconds() - begin;
        if (status != FLASHCPU_OK) return status;
        samples[k][counts[k]++] = seconds;
        total += seconds;
      }
    }
  }
  for (int k = 0; k < 2; k++) {
    qsort(samples[k], (size_t)counts[k], sizeof(double), compare_doubles);
    const int n = counts[k];
    medians[k] = n % 2 ? samples[k][n / 2]
                       : 0.5 * (samples[k][n / 2 - 1] + samples[k][n / 2]);
  }
  return FLASHCPU_OK;
}

static bool challenger_wins(const sweep *s, int i) {
  return s->seconds[i][0] <= s->seconds[i][1];
}

/* splitkv_max_rows: the most rows up to which split-KV won every measured
 * count (at least 1). */
static void choose(sweep *s) {
  s->chosen = 1;
  for (int i = 0; i < s->count && challenger_wins(s, i); i++)
    s->chosen = s->values[i];
}

static void format_ms(double seconds, char *buffer, size_t size) {
  snprintf(buffer, size, "%.3f ms", seconds * 1e3);
}

/* bf16 KV caches of batch x kv to rotate past the last-level cache. */
static int rotated_layers(const tune_options *options, int64_t batch,
                          int64_t kv) {
  const uint64_t layer_bytes = 2u * (uint64_t)batch * (uint64_t)kv *
                               (uint64_t)options->preset->kv_heads *
                               (uint64_t)options->preset->head_dim * 2u;
  uint64_t target =
      ROTATE_CACHE_MULTIPLE *
      (options->llc_bytes ? options->llc_bytes : (uint64_t)32 << 20);
  if (options->quick && target > QUICK_ROTATE_BYTES)
    target = QUICK_ROTATE_BYTES;
  const uint64_t layers = (target + layer_bytes - 1) / layer_bytes;
  return layers < ROTATE_MIN_LAYERS ? ROTATE_MIN_LAYERS
         : layers > 1024            ? 1024
                                    : (int)layers;
}

static int run_sweep(sweep *s, flashcpu_context *contexts[KERNEL_COUNT],
                     const tune_options *options, progress *p) {
  for (int i = 0; i < s->count; i++) {
    int64_t batch = s->batch, rows = s->rows, kv = s->kv;
    rows = s->values[i];
    char what[160];
    snprintf(what, sizeof what, "%s: %s vs %s, batch %lld, %lld row%s, kv %lld",
             s->key, kernel_names[s->a], kernel_names[s->b], (long long)batch,
             (long long)rows, rows == 1 ? "" : "s", (long long)kv);
    show_progress(p, what);
    toolkit_workload_spec spec = toolkit_workload_spec_make(
        options->preset, TOOLKIT_PHASE_DECODE, rows, kv, FLASHCPU_DTYPE_BF16);
    spec.batch = batch;
    spec.layers = rotated_layers(options, batch, kv);
    toolkit_workload workload;
    char error[256];
    if (toolkit_workload_build(&spec, &workload, error, sizeof error) != 0) {
      fprintf(stderr, "%sflashcpu tune: %s: workload: %s\n", p->tty ? "\n" : "",
              what, error);
      return CLI_EXIT_FAILURE;
    }
    flashcpu_status status = time_pair(contexts, s->a, s->b, &workload,
                                       options->quick, s->seconds[i]);
    toolkit_workload_free(&workload);
    if (status != FLASHCPU_OK) {
      fprintf(stderr,
              "%sflashcpu tune: %s: flashcpu_attention failed: %s: "
              "%s\n",
              p->tty ? "\n" : "", what, flashcpu_status_name(status),
              flashcpu_last_error(NULL));
      return CLI_EXIT_FAILURE;
    }
    p->done++;
  }
  choose(s);
  return CLI_EXIT_OK;
}

static void report_sweep(report *r, const sweep *s,
                         const toolkit_preset *preset) {
  say(r, "\n%s = %lld\n", s->key, (long long)s->chosen);
  say(r, "  %s vs %s by query rows; batch %lld, kv %lld, causal\n",
      kernel_names[s->a], kernel_names[s->b], (long long)s->batch,
      (long long)s->kv);
  for (int i = 0; i < s->count; i++) {
    char a[32], b[32];
    format_ms(s->seconds[i][0], a, sizeof a);
    format_ms(s->seconds[i][1], b, sizeof b);
    say(r, "    rows  %6lld  %s %10s  %s %10s  -> %s\n",
        (long long)s->values[i], kernel_names[s->a], a, kernel_names[s->b], b,
        challenger_wins(s, i) ? kernel_names[s->a] : kernel_names[s->b]);
  }
  (void)preset;
  say(r, "  why: the most rows up to which split-KV was at least as fast "
         "at every count (at least 1)\n");
}

/* The report as the file's comments ("# " before each line). */
static bool write_file(const char *path, const report *r, const sweep *sweeps,
                       int count, const unit_race *race,
                       const cli_team_race *teams,
                       const cli_blocking_race *blocking) {
  char temporary[4096];
  snprintf(temporary, sizeof temporary, "%s.tmp", path);
  FILE *file = fopen(temporary, "w");
  if (!file) return false;
  fprintf(file, "flashcpu-tune 2\n");
  const char *line = r->text;
  while (*line) {
    const char *end = strchr(line, '\n');
    size_t length = end ? (size_t)(end - line) : strlen(line);
    fprintf(file, length ? "# %.*s\n" : "#\n", (int)length, line);
    line += length + (end ? 1 : 0);
  }
  fprintf(file, "\n");
  for (int i = 0; i < count; i++)
    fprintf(file, "%s = %lld\n", sweeps[i].key, (long long)sweeps[i].chosen);
  if (race->ran)
    fprintf(file, "prefill_amx = %s\nprefill_bf16_dot = %s\n",
            race->winner == UNIT_AMX ? "on" : "off",
            race->winner == UNIT_DOT ? "on" : "off");
  if (teams->ran)
    fprintf(file, "team_level = %s\nmax_team_size = %d\n",
            cli_team_level_word(teams->shapes[teams->winner].level),
            teams->shapes[teams->winner].max_team_size);
  if (blocking->ran && blocking->winner != 1)
    fprintf(file, "prefill_tile_slots = %lld\n",
            (long long)blocking->slots[blocking->winner]);
  bool ok = ferror(file) == 0;
  ok = fclose(file) == 0 && ok;
  if (ok) ok = rename(temporary, path) == 0;
  if (!ok) remove(temporary);
  return ok;
}

/* The runnable prefill kernel of the ISA for each unit (by the name's
 * parts: __amxbf16, bf16dot, and the plain one of the ISA). */
static void find_units(flashcpu_isa isa, unit_race *race) {
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++) {
    if (!info.runnable || info.isa != isa ||
        strcmp(info.family, "prefill") != 0)
      continue;
    const int unit = strstr(info.name, "__amxbf16") ? UNIT_AMX
                     : strstr(info.name, "bf16dot") ? UNIT_DOT
                                                    : UNIT_FMA;
    if (!race->kernels[unit]) race->kernels[unit] = info.name;
  }
}

static int run_unit_race(unit_race *race, flashcpu_isa isa,
                         const tune_options *options) {
  memset(race, 0, sizeof *race);
  find_units(isa, race);
  int candidates = 0;
  for (int u = 0; u < UNIT_COUNT; u++) candidates += race->kernels[u] != NULL;
  if (candidates < 2) return CLI_EXIT_OK; /* nothing to choose */
  race->length = options->quick ? 1024 : 2048;
  toolkit_workload_spec spec = toolkit_workload_spec_make(
      options->preset, TOOLKIT_PHASE_PREFILL, race->length, race->length,
      FLASHCPU_DTYPE_BF16);
  spec.layers = 1;
  toolkit_workload workload;
  char error[256];
  if (toolkit_workload_build(&spec, &workload, error, sizeof error) != 0) {
    fprintf(stderr, "flashcpu tune: bf16 prefill workload: %s\n", error);
    return CLI_EXIT_FAILURE;
  }
  flashcpu_context *contexts[UNIT_COUNT] = {NULL, NULL, NULL};
  static double samples[UNIT_COUNT][MAX_SAMPLES];
  int counts[UNIT_COUNT] = {0, 0, 0};
  int exit_code = CLI_EXIT_OK;
  for (int u = 0; u < UNIT_COUNT && exit_code == CLI_EXIT_OK; u++) {
    if (!race->kernels[u]) continue;
    flashcpu_context_options context_options;
    flashcpu_context_options_init(&context_options);
    char settings[160];
    snprintf(settings, sizeof settings, "kernel = %s", race->kernels[u]);
    context_options.settings = settings;
    if (flashcpu_context_create(&context_options, &contexts[u]) !=
        FLASHCPU_OK) {
      fprintf(stderr, "flashcpu tune: %s: %s\n", race->kernels[u],
              flashcpu_last_error(NULL));
      exit_code = CLI_EXIT_FAILURE;
    }
  }
  /* Alternating rounds, a warm-up call each, the same workload. */
  const int rounds = options->quick ? 2 : 3, reps = options->quick ? 2 : 3;
  flashcpu_tensor q, k, v, out;
  toolkit_workload_tensors(&workload, 0, &q, &k, &v, &out);
  for (int round = 0; round < rounds && exit_code == CLI_EXIT_OK; round++)
    for (int u = 0; u < UNIT_COUNT && exit_code == CLI_EXIT_OK; u++) {
      if (!contexts[u]) continue;
      for (int rep = -1; rep < reps; rep++) {
        const double begin = toolkit_now_seconds();
        if (flashcpu_attention(contexts[u], &q, &k, &v, &out, NULL,
                               &workload.params) != FLASHCPU_OK) {
          fprintf(stderr, "flashcpu tune: %s: %s\n", race->kernels[u],
                  flashcpu_last_error(contexts[u]));
          exit_code = CLI_EXIT_FAILURE;
          break;
        }
        if (rep >= 0) samples[u][counts[u]++] = toolkit_now_seconds() - begin;
      }
    }
  for (int u = 0; u < UNIT_COUNT; u++) flashcpu_context_destroy(contexts[u]);
  toolkit_workload_free(&workload);
  if (exit_code != CLI_EXIT_OK) return exit_code;
  race->winner = -1;
  for (int u = 0; u < UNIT_COUNT; u++) {
    if (!counts[u]) continue;
    qsort(samples[u], (size_t)counts[u], sizeof(double), compare_doubles);
    race->seconds[u] = samples[u][counts[u] / 2];
    if (race->winner < 0 || race->seconds[u] < race->seconds[race->winner])
      race->winner = u;
  }
  race->ran = true;
  return CLI_EXIT_OK;
}

static void report_race(report *r, const unit_race *race) {
  if (!race->ran) return;
  say(r, "\nprefill_amx = %s\nprefill_bf16_dot = %s\n",
      race->winner == UNIT_AMX ? "on" : "off",
      race->winner == UNIT_DOT ? "on" : "off");
  say(r, "  bf16 prefill, L = S = %lld, causal, by unit:\n",
      (long long)race->length);
  for (int u = 0; u < UNIT_COUNT; u++) {
    if (!race->kernels[u]) continue;
    char time[32];
    format_ms(race->seconds[u], time, sizeof time);
    say(r, "    %-18s %-40s %10s%s\n", unit_names[u], race->kernels[u], time,
        u == race->winner ? "  <- fastest" : "");
  }
}

static void report_teams(report *r, const cli_team_race *teams) {
  if (!teams->ran) return;
  const cli_team_shape *won = &teams->shapes[teams->winner];
  say(r, "\nteam_level = %s\nmax_team_size = %d\n",
      cli_team_level_word(won->level), won->max_team_size);
  say(r,
      "  %d threads; time over the default shape's, medians of per-turn "
      "ratios,\n  bf16 prefill L = S = %lld causal / decode kv %lld "
      "(a shape wins below %.2f):\n",
      teams->threads, (long long)teams->prefill_length,
      (long long)teams->decode_kv, CLI_TEAM_WIN_BELOW);
  for (int s = 0; s < teams->count; s++) {
    const cli_team_shape *shape = &teams->shapes[s];
    char name[48];
    if (shape->max_team_size > 0)
      snprintf(name, sizeof name, "%s, at most %d",
               cli_team_level_word(shape->level), shape->max_team_size);
    else
      snprintf(name, sizeof name, "%s", cli_team_level_word(shape->level));
    say(r, "    %-18s %3d team%s  %6.3f / %6.3f%s\n", name, shape->teams,
        shape->teams == 1 ? " " : "s", shape->prefill_ratio,
        shape->decode_ratio, s == teams->winner ? "  <- chosen" : "");
  }
}

static void report_blocking(report *r, const cli_blocking_race *b) {
  if (!b->ran) return;
  say(r, "\nprefill_tile_slots = %lld%s\n", (long long)b->slots[b->winner],
      b->winner == 1 ? " (the row's: not written)" : "");
  say(r,
      "  %s; time over the row's %lld slots per tile, median of per-turn "
      "ratios,\n  bf16 prefill L = S = %lld causal (a value wins below "
      "%.2f):\n",
      b->kernel, (long long)b->row_slots, (long long)b->prefill_length,
      CLI_BLOCKING_WIN_BELOW);
  for (int i = 0; i < CLI_TILE_SLOT_CANDIDATES; i++)
    say(r, "    %5lld slots  %6.3f%s\n", (long long)b->slots[i], b->ratios[i],
        i == b->winner ? "  <- chosen" : "");
}

static void set_sweep(sweep *s, const char *key, kernel a, kernel b, char axis,
                      int64_t batch, int64_t rows, int64_t kv,
                      const int64_t *values, int count) {
  memset(s, 0, sizeof *s);
  s->key = key;
  s->a = a;
  s->b = b;
  s->axis = axis;
  s->batch = batch;
  s->rows = rows;
  s->kv = kv;
  s->count = count;
  memcpy(s->values, values, (size_t)count * sizeof *values);
}

/* Whether this build has a split-KV kernel this context's ISA runs. */
static bool has_splitkv(flashcpu_context *ctx) {
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++)
    if (info.runnable && info.isa == flashcpu_context_isa(ctx) &&
        strcmp(info.family, "split-KV decode") == 0)
      return true;
  return false;
}

int cli_tune(int argc, char **argv) {
  tune_options options;
  int parsed = parse(argc, argv, &options);
  if (parsed >= 0) return parsed;
  /* Measured against the built-in defaults, whatever tune file the
   * environment names (a context option left at its default would take
   * that file's value). */
  unsetenv("FLASHCPU_TUNE_FILE");

  int exit_code = CLI_EXIT_OK;
  flashcpu_context *contexts[KERNEL_COUNT] = {NULL, NULL};
  for (int k = 0; k < KERNEL_COUNT && exit_code == CLI_EXIT_OK; k++) {
    flashcpu_context_options context_options;
    flashcpu_context_options_init(&context_options);
    context_options.settings = kernel_forcing[k];
    if (flashcpu_context_create(&context_options, &contexts[k]) !=
        FLASHCPU_OK) {
      fprintf(stderr, "flashcpu tune: flashcpu_context_create failed: %s\n",
              flashcpu_last_error(NULL));
      exit_code = CLI_EXIT_FAILURE;
    }
  }

  const toolkit_preset *preset = options.preset;
  report r;
  r.length = 0;
  r.text[0] = '\0';
  sweep sweeps[1];
  int sweep_count = 0;
  unit_race race;
  memset(&race, 0, sizeof race);
  cli_team_race teams;
  cli_blocking_race blocking = {.ran = false, .winner = 1};
  memset(&teams, 0, sizeof teams);
  if (exit_code == CLI_EXIT_OK) {
    toolkit_cpu_info info;
    toolkit_cpu_info_query(&info);
    options.llc_bytes = info.llc_total_bytes;
    const int threads = flashcpu_context_num_threads(contexts[0]);
    char date[32] = "";
    time_t now = time(NULL);
    struct tm local;
    if (localtime_r(&now, &local))
      strftime(date, sizeof date, "%Y-%m-%d %H:%M", &local);
    say(&r, "Written by flashcpu tune%s (flashcpu %s) on %s, %s\n",
        options.quick ? " --quick" : "", flashcpu_version_string(), info.model,
        date);
    say(&r,
        "%d thread%s in %d team%s, %s kernels; %s shape (Hq %lld, Hkv "
        "%lld, D %lld), bf16, medians\n",
        threads, threads == 1 ? "" : "s",
        flashcpu_context_num_teams(contexts[0]),
        flashcpu_context_num_teams(contexts[0]) == 1 ? "" : "s",
        flashcpu_isa_name(flashcpu_context_isa(contexts[0])), preset->name,
        (long long)preset->q_heads, (long long)preset->kv_heads,
        (long long)preset->head_dim);
    if (!has_splitkv(contexts[0])) {
      say(&r,
          "\nThe %s kernel table has no split-KV decode kernel to "
          "choose: the defaults are written.\n",
          flashcpu_isa_name(flashcpu_context_isa(contexts[0])));
    } else {
      static const int64_t rows_full[] = {2,  3,  4,  6,  8, 12,
                                          16, 24, 32, 48, 64};
      static const int64_t rows_quick[] = {2, 4, 8, 16};
      const bool q = options.quick;
      const int64_t fixed_kv = q ? 2048 : 4096;
      set_sweep(&sweeps[sweep_count++], "splitkv_max_rows", KERNEL_SPLITKV,
                KERNEL_PREFILL, 'r', 1, 0, fixed_kv, q ? rows_quick : rows_full,
                q ? 4 : 11);
      progress p = {0, 0, toolkit_now_seconds(), isatty(fileno(stderr)) == 1};
      for (int i = 0; i < sweep_count; i++) p.total += sweeps[i].count;
      for (int i = 0; i < sweep_count && exit_code == CLI_EXIT_OK; i++)
        exit_code = run_sweep(&sweeps[i], contexts, &options, &p);
      if (exit_code == CLI_EXIT_OK) {
        if (p.tty) fprintf(stderr, "\r\033[K");
        fprintf(stderr, "[%d/%d %5.1f s] done\n", p.done, p.total,
                toolkit_now_seconds() - p.start);
      }
      for (int i = 0; i < sweep_count && exit_code == CLI_EXIT_OK; i++)
        report_sweep(&r, &sweeps[i], preset);
    }
    if (exit_code == CLI_EXIT_OK)
      exit_code =
          run_unit_race(&race, flashcpu_context_isa(contexts[0]), &options);
    report_race(&r, &race);
    if (exit_code == CLI_EXIT_OK) {
      const int64_t decode_kv = options.quick ? 2048 : 4096;
      cli_team_race_spec spec = {.preset = preset,
                                 .quick = options.quick,
                                 .prefill_length = options.quick ? 512 : 2048,
                                 .decode_kv = decode_kv,
                                 .decode_layers =
                                     rotated_layers(&options, 1, decode_kv),
                                 .settings = NULL};
      char unit_settings[80];
      if (race.ran) {
        snprintf(unit_settings, sizeof unit_settings,
                 "prefill_amx = %s; prefill_bf16_dot = %s",
                 race.winner == UNIT_AMX ? "on" : "off",
                 race.winner == UNIT_DOT ? "on" : "off");
        spec.settings = unit_settings;
      }
      fprintf(stderr, "team shapes ...\n");
      if (cli_tune_team_race(&spec, &teams) != 0) exit_code = CLI_EXIT_FAILURE;
      report_teams(&r, &teams);
      fprintf(stderr, "prefill tile slots ...\n");
      if (exit_code == CLI_EXIT_OK &&
          cli_tune_blocking_race(preset, options.quick, spec.settings,
                                 &blocking) != 0)
        exit_code = CLI_EXIT_FAILURE;
      report_blocking(&r, &blocking);
    }
  }
  for (int k = 0; k < KERNEL_COUNT; k++) flashcpu_context_destroy(contexts[k]);

  if (exit_code == CLI_EXIT_OK) {
    fputs(r.text, stdout);
    if (!write_file(options.out, &r, sweeps, sweep_count, &race, &teams,
                    &blocking)) {
      fprintf(stderr, "flashcpu tune: cannot write %s\n", options.out);
      exit_code = CLI_EXIT_FAILURE;
    }
  }
  if (exit_code == CLI_EXIT_OK) {
    /* The library must accept what was written. */
    flashcpu_context_options context_options;
    flashcpu_context_options_init(&context_options);
    context_options.tune_file = options.out;
    context_options.num_threads = 1;
    flashcpu_context *check = NULL;
    if (flashcpu_context_create(&context_options, &check) != FLASHCPU_OK) {
      fprintf(stderr, "flashcpu tune: the library rejects %s: %s\n",
              options.out, flashcpu_last_error(NULL));
      exit_code = CLI_EXIT_FAILURE;
    }
    flashcpu_context_destroy(check);
  }
  if (exit_code == CLI_EXIT_OK) {
    printf("\nwrote %s; use it with FLASHCPU_TUNE_FILE=%s or "
           "flashcpu_context_options.tune_file\n",
           options.out, options.out);
  }
  return exit_code;
}
