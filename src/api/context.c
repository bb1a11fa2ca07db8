/* Context lifetime: resolves the thread count, loads the topology and the
 * team plan once, fills the kernel table once. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/context_internal.h"
#include "api/describe.h"
#include "api/errors.h"
#include "dispatch/isa.h"
#include "dispatch/tune_file.h"

#define CALL "flashcpu_context_create"

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

/* The caller's options as this version's struct. Two layouts are
 * accepted: this version's and 0.1.0's, which ends before tune_file (its
 * missing fields keep their defaults). */
static flashcpu_status copy_options(const flashcpu_context_options *options,
                                    flashcpu_context_options *copy) {
  flashcpu_context_options_init(copy);
  const size_t v010 = offsetof(flashcpu_context_options, tune_file);
  if (options->struct_size != sizeof(flashcpu_context_options) &&
      options->struct_size != v010)
    return fc_fail(
        NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
        CALL ": options->struct_size is %zu, expected %zu (or "
             "0.1.0's %zu; call flashcpu_context_options_init first)",
        options->struct_size, sizeof(flashcpu_context_options), v010);
  memcpy(copy, options, options->struct_size);
  copy->struct_size = sizeof *copy;
  return FLASHCPU_OK;
}

static flashcpu_status check_options(const flashcpu_context_options *options) {
  const flashcpu_host_openmp *host = options->host_openmp;
  if (host && (!host->parallel || !host->thread_num || !host->num_threads))
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": host_openmp needs all three of parallel, "
                        "thread_num and num_threads (GOMP_parallel, "
                        "omp_get_thread_num and omp_get_num_threads of one "
                        "OpenMP runtime)");
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
                                   flashcpu_isa *isa, flashcpu_isa *cap) {
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
  *cap = lower_cap(caps[0], caps[1]);
  *isa = fc_best_isa(features, *cap);
  return FLASHCPU_OK;
}

/* The option fields that are settings too: a field away from its default
 * wins over the tune file; given in the settings string as well, it is an
 * error (which of the two was meant?). */
static flashcpu_status apply_fields(const flashcpu_context_options *options,
                                    const bool given[FC_KEY_COUNT],
                                    fc_settings *settings) {
  const bool set[2] = {options->team_level != FLASHCPU_TEAM_AUTO,
                       options->max_team_size != 0};
  const fc_setting_key keys[2] = {FC_KEY_TEAM_LEVEL, FC_KEY_MAX_TEAM_SIZE};
  for (int i = 0; i < 2; i++)
    if (set[i] && given[keys[i]])
      return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": %s is set both as a field of the options and in "
                          "options->settings; give it once",
                     fc_setting_key_name(keys[i]));
  /* check_options has range-checked both */
  if (set[0]) settings->team_level = options->team_level;
  if (set[1]) settings->max_team_size = options->max_team_size;
  return FLASHCPU_OK;
}

/* The settings: the defaults, then the tune file (the option, else
 * FLASHCPU_TUNE_FILE), then the settings string, key by key, then the
 * fields team_level and max_team_size. `source` says where the file came
 * from. */
static flashcpu_status resolve_settings(const flashcpu_context_options *options,
                                        fc_settings *settings, char *source,
                                        size_t source_size) {
  const fc_cpu_features *cpu = fc_cpu_features_get();
  fc_settings_default(settings, cpu);
  const char *env_file = getenv("FLASHCPU_TUNE_FILE");
  const char *path = options->tune_file;
  const char *from = "the context option tune_file";
  if (!path && env_file && *env_file) {
    path = env_file;
    from = "FLASHCPU_TUNE_FILE";
  }
  char error[FC_ERROR_MESSAGE_SIZE - 128];
  if (path) {
    if (!*path)
      return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": tune_file is \"\"; give a path, or NULL for "
                          "FLASHCPU_TUNE_FILE or the defaults");
    if (fc_tune_file_apply(path, settings, cpu, error, sizeof error) != 0)
      return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                     CALL ": tune file (%s): %s", from, error);
    snprintf(source, source_size, "tune file %s (%s)", path, from);
  } else {
    snprintf(source, source_size, "built-in defaults");
  }
  bool given[FC_KEY_COUNT] = {false};
  if (options->settings &&
      fc_settings_text_apply(options->settings, settings, cpu, given, error,
                             sizeof error) != 0)
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": options->settings: %s", error);
  return apply_fields(options, given, settings);
}

/* A forced kernel sets the ISA: it must be within the caps and run here. */
static flashcpu_status forced_kernel_isa(const fc_settings *settings,
                                         flashcpu_isa cap, flashcpu_isa *isa) {
  if (!settings->forced_kernel[0]) return FLASHCPU_OK;
  const fc_cpu_features *cpu = fc_cpu_features_get();
  const fc_attention_kernel *k =
      fc_attention_kernel_find(settings->forced_kernel);
  if (!fc_isa_within(k->isa, cap))
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": kernel %s needs %s, above the ISA cap %s "
                        "(max_isa or FLASHCPU_ISA)",
                   k->name, flashcpu_isa_name(k->isa), flashcpu_isa_name(cap));
  if (!fc_isa_supported(cpu, k->isa) || !fc_kernel_need_met(cpu, k->need))
    return fc_fail(NULL, FLASHCPU_ERROR_INVALID_ARGUMENT,
                   CALL ": kernel %s needs instructions this CPU (or OS) "
                        "does not support",
                   k->name);
  *isa = k->isa;
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
  flashcpu_status status = options ? copy_options(options, &copy) : FLASHCPU_OK;
  options = &copy;
  flashcpu_isa isa = FLASHCPU_ISA_SCALAR, cap = FLASHCPU_ISA_AUTO;
  if (status != FLASHCPU_OK || (status = check_options(options)) ||
      (status = resolve_isa(options, &isa, &cap)))
    return status;
  fc_settings settings;
  char settings_source[FC_ERROR_MESSAGE_SIZE];
  if ((status = resolve_settings(options, &settings, settings_source,
                                 sizeof settings_source)) ||
      (status = forced_kernel_isa(&settings, cap, &isa)))
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
  static atomic_uint_least64_t contexts_created;
  created->id = atomic_fetch_add(&contexts_created, 1) + 1;
  char error[256];
  fc_runtime_options runtime_options = {source,
                                        threads,
                                        settings.team_level,
                                        settings.max_team_size,
                                        settings.launch,
                                        options->host_openmp};
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
  created->settings = settings;
  fc_kernel_table_fill(&created->table, isa, fc_cpu_features_get(), &settings);
  const char *verbose = getenv("FLASHCPU_VERBOSE");
  created->verbose = verbose && *verbose && strcmp(verbose, "0") != 0;
  if (created->verbose) {
    char line[512];
    fc_settings_describe(&settings, line, sizeof line);
    fc_describe_to_stderr(created);
    fprintf(stderr, "[flashcpu] settings from %s and the options: %s\n",
            settings_source, line);
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

void flashcpu_context_wake(flashcpu_context *ctx) {
  if (ctx) fc_runtime_wake(&ctx->runtime);
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

fc_kernel_env fc_context_kernel_env(flashcpu_context *ctx, char *reason,
                                    size_t reason_size) {
  fc_kernel_env env = {&ctx->runtime,
                       ctx->table.row_to_f32,
                       ctx->table.dequant_row,
                       &ctx->table.settings,
                       0,
                       reason,
                       reason_size};
  if (reason_size) reason[0] = '\0';
  return env;
}

const char *flashcpu_context_last_kernels(const flashcpu_context *ctx) {
  return ctx ? ctx->last_kernels : "";
}
