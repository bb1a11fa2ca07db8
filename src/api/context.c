/* Context lifetime: resolves the thread count, loads the topology and the
 * team plan once, fills the kernel table once. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/describe.h"
#include "api/errors.h"
#include "api/tune_file.h"

#define CALL "flashcpu_context_create"

/* The pool: faster launches on both machines measured (bench/NOTES.md),
 * and its threads are flashcpu's own, so binding them never touches the
 * engine's OpenMP workers. */
#define FC_DEFAULT_LAUNCH_MODE FC_LAUNCH_POOL

void flashcpu_context_options_init(flashcpu_context_options *options) {
  if (!options) return;
  memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

/* A positive integer from the environment, 0 when unset, -1 when invalid. */
static int positive_from_env(const char *name) {
  const char *text = getenv(name);
  if (!text || !*text) return 0;
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  /* OMP_NUM_THREADS may list nesting levels ("8,2"): the first one counts. */
  if (errno || end == text || (*end && *end != ',') || value <= 0 ||
      value > 65536)
    return -1;
  return (int)value;
}

/* Lower of two caps; NEON and the x86 ISAs never meet on one machine. */
static flashcpu_isa lower_cap(flashcpu_isa a, flashcpu_isa b) {
  if (a == FLASHCPU_ISA_AUTO) return b;
  if (b == FLASHCPU_ISA_AUTO) return a;
  return a < b ? a : b;
}

/* sizeof(flashcpu_context_options) in 0.1.0, before tune_file. */
#define FC_CONTEXT_OPTIONS_SIZE_0_1                                            \
  offsetof(flashcpu_context_options, tune_file)

/* The caller's options as this version's struct: the fields an earlier
 * version's struct lacks keep their defaults. */
static flashcpu_status copy_options(const flashcpu_context_options *options,
                                    flashcpu_context_options *copy) {
  flashcpu_context_options_init(copy);
  if (options->struct_size != sizeof(flashcpu_context_options) &&
      options->struct_size != FC_CONTEXT_OPTIONS_SIZE_0_1)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": options->struct_size is %zu, expected %zu (call "
                   "flashcpu_context_options_init first)",
                   options->struct_size, sizeof(flashcpu_context_options));
  memcpy(copy, options, options->struct_size);
  copy->struct_size = sizeof *copy;
  return FLASHCPU_OK;
}

static flashcpu_status check_options(const flashcpu_context_options *options) {
  if (options->num_threads < 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": num_threads is %d; it must be 0 (all allowed cores) "
                   "or positive",
                   options->num_threads);
  if ((int)options->team_level < FLASHCPU_TEAM_AUTO ||
      (int)options->team_level > FLASHCPU_TEAM_NUMA)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": team_level is %d; expected a flashcpu_team_level",
                   (int)options->team_level);
  if (options->max_team_size < 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": max_team_size is %d; it must be 0 (no limit) or "
                   "positive",
                   options->max_team_size);
  if ((int)options->max_isa < FLASHCPU_ISA_AUTO ||
      (int)options->max_isa > FLASHCPU_ISA_NEON)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": max_isa is %d; expected a flashcpu_isa",
                   (int)options->max_isa);
  return FLASHCPU_OK;
}

static flashcpu_status resolve_isa(const flashcpu_context_options *options,
                                   flashcpu_isa *isa) {
  const fc_cpu_features *features = fc_cpu_features_get();
  const char *env = getenv("FLASHCPU_ISA");
  int env_isa = fc_isa_parse(env);
  if (env_isa < 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": FLASHCPU_ISA=%s names no ISA (scalar, avx2, avx512, "
                   "neon)",
                   env);
  flashcpu_isa caps[2] = {options->max_isa, (flashcpu_isa)env_isa};
  const char *where[2] = {"max_isa", "FLASHCPU_ISA"};
  for (int i = 0; i < 2; i++)
    if (!fc_isa_supported(features, caps[i]))
      return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": %s asks for %s, which this CPU (or OS) does not "
                     "support",
                     where[i], flashcpu_isa_name(caps[i]));
  *isa = fc_best_isa(features, lower_cap(caps[0], caps[1]));
  return FLASHCPU_OK;
}

/* The decode thresholds: the defaults, replaced by the tune file (the
 * option, else FLASHCPU_TUNE_FILE), then single values from
 * FLASHCPU_DECODE_THRESHOLDS. `source` says where they came from. */
static flashcpu_status resolve_thresholds(
    const flashcpu_context_options *options, fc_decode_thresholds *t,
    char *source, size_t source_size) {
  *t = fc_decode_thresholds_default();
  const char *env_file = getenv("FLASHCPU_TUNE_FILE");
  const char *path = options->tune_file;
  const char *from = "the context option tune_file";
  if (!path && env_file && *env_file) {
    path = env_file;
    from = "FLASHCPU_TUNE_FILE";
  }
  if (path) {
    char error[FC_ERROR_MESSAGE_SIZE - 128];
    if (!*path)
      return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": tune_file is \"\"; give a path, or NULL for "
                     "FLASHCPU_TUNE_FILE or the defaults");
    if (fc_tune_file_apply(path, t, error, sizeof error) != 0)
      return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": tune file (%s): %s", from, error);
    snprintf(source, source_size, "tune file %s (%s)", path, from);
  } else {
    snprintf(source, source_size, "built-in defaults");
  }
  const char *thresholds = getenv("FLASHCPU_DECODE_THRESHOLDS");
  if (fc_decode_thresholds_parse(thresholds, t) != 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": FLASHCPU_DECODE_THRESHOLDS=%s: expected "
                   "name=value,... with onepass_min_tiles, onepass_max_kv "
                   "or splitkv_max_rows (<= 64), values >= 0",
                   thresholds);
  if (thresholds && *thresholds) {
    size_t used = strlen(source);
    snprintf(source + used, source_size - used,
             ", then FLASHCPU_DECODE_THRESHOLDS=%s", thresholds);
  }
  return FLASHCPU_OK;
}

/* FLASHCPU_LAUNCH=region|pool picks how launches get their threads. */
static flashcpu_status resolve_launch_mode(fc_launch_mode *mode) {
  const char *text = getenv("FLASHCPU_LAUNCH");
  *mode = FC_DEFAULT_LAUNCH_MODE;
  if (!text || !*text) return FLASHCPU_OK;
  if (strcmp(text, "region") == 0) {
    *mode = FC_LAUNCH_REGION;
  } else if (strcmp(text, "pool") == 0) {
    *mode = FC_LAUNCH_POOL;
  } else {
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": FLASHCPU_LAUNCH=%s is neither region nor pool",
                   text);
  }
  return FLASHCPU_OK;
}

flashcpu_status fc_context_create_on(const flashcpu_context_options *options,
                                     const fc_topology_source *source,
                                     flashcpu_context **ctx) {
  if (!ctx)
    return fc_fail(NULL, FLASHCPU_ERROR_NULL_POINTER,
                   CALL ": ctx (the output pointer) is NULL");
  *ctx = NULL;
  flashcpu_context_options copy;
  flashcpu_context_options_init(&copy);
  flashcpu_status status =
      options ? copy_options(options, &copy) : FLASHCPU_OK;
  options = &copy;
  flashcpu_isa isa = FLASHCPU_ISA_SCALAR;
  if (status != FLASHCPU_OK || (status = check_options(options)) ||
      (status = resolve_isa(options, &isa)))
    return status;
  fc_decode_thresholds decode_thresholds;
  char thresholds_source[FC_ERROR_MESSAGE_SIZE];
  if ((status = resolve_thresholds(options, &decode_thresholds,
                                   thresholds_source,
                                   sizeof thresholds_source)))
    return status;
  int threads = options->num_threads;
  if (threads == 0) threads = positive_from_env("OMP_NUM_THREADS");
  if (threads < 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": OMP_NUM_THREADS=%s is not a positive number",
                   getenv("OMP_NUM_THREADS"));

  flashcpu_context *created = calloc(1, sizeof *created);
  if (!created)
    return fc_fail(NULL, FLASHCPU_ERROR_OUT_OF_MEMORY, CALL ": out of memory");
  char error[256];
  fc_launch_mode mode;
  if ((status = resolve_launch_mode(&mode)) != FLASHCPU_OK) {
    free(created);
    return status;
  }
  fc_runtime_options runtime_options = {source, threads, options->team_level,
                                        options->max_team_size, mode};
  int failure = fc_runtime_create(&created->runtime, &runtime_options, error,
                                  sizeof error);
  if (failure != 0) {
    free(created);
    return fc_fail(NULL,
                   failure == FC_RUNTIME_OUT_OF_MEMORY
                       ? FLASHCPU_ERROR_OUT_OF_MEMORY
                       : FLASHCPU_ERROR_INTERNAL,
                   CALL ": cannot set up the runtime: %s", error);
  }
  fc_kernel_table_fill(&created->table, isa);
  created->table.decode_thresholds = decode_thresholds;
  const char *verbose = getenv("FLASHCPU_VERBOSE");
  created->verbose = verbose && *verbose && strcmp(verbose, "0") != 0;
  if (created->verbose) {
    fc_describe_to_stderr(created);
    fprintf(stderr,
            "[flashcpu] decode thresholds from %s: onepass_min_tiles=%lld "
            "onepass_max_kv=%lld splitkv_max_rows=%lld\n",
            thresholds_source, (long long)decode_thresholds.onepass_min_tiles,
            (long long)decode_thresholds.onepass_max_kv,
            (long long)decode_thresholds.splitkv_max_rows);
  }
  *ctx = created;
  fc_clear_error(NULL);
  return FLASHCPU_OK;
}

flashcpu_status flashcpu_context_create(const flashcpu_context_options *options,
                                        flashcpu_context **ctx) {
  return fc_context_create_on(options, NULL, ctx);
}

void flashcpu_context_destroy(flashcpu_context *ctx) {
  if (!ctx) return;
  fc_runtime_destroy(&ctx->runtime);
  free(ctx);
}

int flashcpu_context_num_threads(const flashcpu_context *ctx) {
  return ctx ? ctx->runtime.plan.thread_count : 0;
}

int flashcpu_context_num_teams(const flashcpu_context *ctx) {
  return ctx ? ctx->runtime.plan.team_count : 0;
}

flashcpu_isa flashcpu_context_isa(const flashcpu_context *ctx) {
  return ctx ? ctx->table.isa : FLASHCPU_ISA_AUTO;
}
