/* Option parsing for `flashcpu run`: --name VALUE or --name=VALUE. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/workload.h"

void cli_print_run_help(FILE *stream) {
  fprintf(
      stream,
      "usage: flashcpu run [options]\n"
      "\n"
      "Times flashcpu_attention on a model-shaped workload, checks sampled "
      "rows\n"
      "against a float64 oracle and reports GB/s, GFLOP/s and the percent of "
      "the\n"
      "machine's ceiling that binds (decode: read bandwidth; prefill: fp32 "
      "FMA),\n"
      "both measured at start-up. Defaults: llama3-8b, bf16, one decode at kv "
      "8192\n"
      "and one causal prefill at 2048.\n"
      "\n"
      "  --preset NAME        model shape (see below; default llama3-8b)\n"
      "  --phase P            decode | prefill | verify | serve | both "
      "(decode\n"
      "                       and prefill) | all (default both); verify is a\n"
      "                       speculative decoding step: L draft rows under a\n"
      "                       binary tree mask over the newest L keys; serve "
      "is\n"
      "                       an engine's step on paged K/V: B decode "
      "requests\n"
      "                       (kv 1K to S, evenly) and a prefill chunk of L "
      "rows\n"
      "                       onto --prefix cached keys, one\n"
      "                       flashcpu_attention_paged call, then the same "
      "step\n"
      "                       on contiguous K/V (two flashcpu_attention "
      "calls:\n"
      "                       the decode requests as one batch, then the "
      "chunk)\n"
      "  --rows L             query rows (decode 1, verify 8, prefill = kv,\n"
      "                       serve 512: the chunk's)\n"
      "  --kv S               keys/values (decode, verify 8192; prefill 2048;\n"
      "                       serve 32768: the longest decode request)\n"
      "  --batch B            sequences (default 1; serve: decode requests, "
      "32)\n"
      "  --shortest N         kv lengths of the batch spread evenly from N\n"
      "                       (batch 0) to --kv (the last): decode and "
      "verify\n"
      "                       batches of mixed lengths; serve: its decode\n"
      "                       requests (default 0: decode and verify all "
      "--kv,\n"
      "                       serve 1024)\n"
      "  --prefix P           serve: keys cached before the chunk (default "
      "4096)\n"
      "  --page-size N        K/V in pages of N tokens in a random order, "
      "called\n"
      "                       through a plan and flashcpu_attention_paged, "
      "and\n"
      "                       the same on contiguous K/V for comparison, the\n"
      "                       two in turns (bursts of 5 calls; 30 reps each\n"
      "                       unless --reps; after it with --idle-us); 0 =\n"
      "                       contiguous only (default 0; serve 16)\n"
      "  --dtype T            f32 | f16 | bf16 for q, k, v and out (default "
      "bf16)\n"
      "  --kv-dtype T         dtype of k and v (default --dtype); also i8, u8\n"
      "                       (per-token scales), f8_e4m3, f8_e5m2 (a "
      "per-tensor\n"
      "                       scale) and q8_0\n"
      "  --out-dtype T        dtype of the output (default --dtype)\n"
      "  --threads N          worker threads; 0 = library default (default 0)\n"
      "  --isa I              highest ISA: auto | scalar | avx2 | avx512 | "
      "neon\n"
      "  --team-level T       threads sharing this cache form a team (share "
      "K/V\n"
      "                       tiles): auto | core | l2 | l3 | numa (default "
      "auto)\n"
      "  --max-team N         at most N threads a team; 0 = no cap (default "
      "0)\n"
      "  --causal, --no-causal  override the preset's causal mask\n"
      "  --window L,R         sliding window, -1 = unbounded (default: "
      "preset's)\n"
      "  --softcap X          score softcap, 0 = off (default: preset's)\n"
      "  --reps N             timed repetitions; 0 = at least 5, more while "
      "the\n"
      "                       total stays under a second (default 0)\n"
      "  --check-rows N       output rows checked against the oracle (default "
      "16)\n"
      "  --layers N           KV caches rotated in decode and verify; 0 = "
      "enough\n"
      "                       to exceed the last-level cache 4 times, at least "
      "32,\n"
      "                       within a quarter of RAM (default 0)\n"
      "  --idle-us N          sleep N microseconds before each timed call, as "
      "an\n"
      "                       engine's calls arrive after work that leaves "
      "the\n"
      "                       cores idle: the time then includes waking the\n"
      "                       cores and the pool's threads (default 0: back "
      "to\n"
      "                       back; not with --against-tune)\n"
      "  --wake-ahead-us M    with --idle-us: call flashcpu_context_wake M us\n"
      "                       before each timed call, within the idle time\n"
      "  --against-tune FILE  also time a second context set by the tune file\n"
      "                       FILE, the two in turns (bursts of 5 calls, each\n"
      "                       after a pause that lets the other's threads\n"
      "                       sleep), and report its time over the first's: "
      "an\n"
      "                       A/B of two settings on a host whose speed "
      "drifts\n"
      "  -h, --help           this help\n"
      "\n"
      "presets:\n");
  int count;
  const toolkit_preset *presets = toolkit_presets(&count);
  for (int i = 0; i < count; i++)
    fprintf(stream, "  %-12s Hq %3lld  Hkv %3lld  D %3lld  %s\n",
            presets[i].name, (long long)presets[i].q_heads,
            (long long)presets[i].kv_heads, (long long)presets[i].head_dim,
            presets[i].notes);
}

static int usage_error(const char *format, ...)
    __attribute__((format(printf, 1, 2)));

static int usage_error(const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  fprintf(stderr, "flashcpu run: ");
  vfprintf(stderr, format, arguments);
  fprintf(stderr, "\n(see flashcpu run --help)\n");
  va_end(arguments);
  return CLI_EXIT_USAGE;
}

static bool is_valued_flag(const char *flag) {
  static const char *const flags[] = {
      "--preset",       "--phase",      "--rows",         "--kv",
      "--batch",        "--dtype",      "--kv-dtype",     "--out-dtype",
      "--threads",      "--isa",        "--window",       "--softcap",
      "--reps",         "--check-rows", "--layers",       "--team-level",
      "--max-team",     "--page-size",  "--prefix",       "--shortest",
      "--against-tune", "--idle-us",    "--wake-ahead-us"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (strcmp(flag, flags[i]) == 0) return true;
  return false;
}

static bool parse_int64(const char *text, int64_t min, int64_t max,
                        int64_t *value) {
  char *end = NULL;
  errno = 0;
  long long parsed = strtoll(text, &end, 10);
  if (errno || end == text || *end != '\0' || parsed < min || parsed > max)
    return false;
  *value = parsed;
  return true;
}

/* Parses an integer option into *value; -1 or an exit code. */
static int integer_option(const char *flag, const char *value, int64_t min,
                          int64_t max, int64_t *parsed) {
  if (parse_int64(value, min, max, parsed)) return -1;
  return usage_error("%s takes an integer from %lld to %lld, not '%s'", flag,
                     (long long)min, (long long)max, value);
}

static int int_option(const char *flag, const char *value, int min, int max,
                      int *parsed) {
  int64_t wide = 0;
  int status = integer_option(flag, value, min, max, &wide);
  *parsed = (int)wide;
  return status;
}

static bool parse_dtype(const char *text, flashcpu_dtype *dtype) {
  static const flashcpu_dtype all[] = {FLASHCPU_DTYPE_F32, FLASHCPU_DTYPE_F16,
                                       FLASHCPU_DTYPE_BF16};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(text, flashcpu_dtype_name(all[i])) == 0) {
      *dtype = all[i];
      return true;
    }
  return false;
}

/* K and V may also be quantized (per-token scales for i8 and u8, a
 * per-tensor scale for fp8, q8_0's own blocks). */
static bool parse_kv_dtype(const char *text, flashcpu_dtype *dtype) {
  if (parse_dtype(text, dtype)) return true;
  static const flashcpu_dtype quantized[] = {
      FLASHCPU_DTYPE_I8, FLASHCPU_DTYPE_U8, FLASHCPU_DTYPE_F8_E4M3,
      FLASHCPU_DTYPE_F8_E5M2, FLASHCPU_DTYPE_Q8_0};
  for (size_t i = 0; i < sizeof quantized / sizeof quantized[0]; i++)
    if (strcmp(text, flashcpu_dtype_name(quantized[i])) == 0) {
      *dtype = quantized[i];
      return true;
    }
  return false;
}

static bool parse_isa(const char *text, flashcpu_isa *isa) {
  static const flashcpu_isa all[] = {FLASHCPU_ISA_AUTO, FLASHCPU_ISA_SCALAR,
                                     FLASHCPU_ISA_AVX2, FLASHCPU_ISA_AVX512,
                                     FLASHCPU_ISA_NEON};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(text, flashcpu_isa_name(all[i])) == 0) {
      *isa = all[i];
      return true;
    }
  return false;
}

/* "L,R" with each -1 or a non-negative count. */
static bool parse_window(const char *text, int64_t *left, int64_t *right) {
  const char *comma = strchr(text, ',');
  if (!comma || comma == text) return false;
  char left_text[32];
  size_t length = (size_t)(comma - text);
  if (length >= sizeof left_text) return false;
  memcpy(left_text, text, length);
  left_text[length] = '\0';
  return parse_int64(left_text, -1, INT64_C(1) << 40, left) &&
         parse_int64(comma + 1, -1, INT64_C(1) << 40, right);
}

static bool parse_softcap(const char *text, float *softcap) {
  char *end = NULL;
  errno = 0;
  double parsed = strtod(text, &end);
  if (errno || end == text || *end != '\0' || !isfinite(parsed) ||
      parsed < 0.0 || parsed > 1e30)
    return false;
  *softcap = (float)parsed;
  return true;
}

static void set_defaults(run_options *options) {
  memset(options, 0, sizeof *options);
  options->preset = toolkit_preset_find("llama3-8b");
  options->run_decode = options->run_prefill = true;
  options->page_size = -1;
  options->prefix = TOOLKIT_SERVE_PREFIX_ROWS;
  options->q_dtype = options->kv_dtype = options->out_dtype =
      FLASHCPU_DTYPE_BF16;
  options->max_isa = FLASHCPU_ISA_AUTO;
  options->team_level = FLASHCPU_TEAM_AUTO;
  options->causal = -1;
  options->check_rows = 16;
}

/* Applies one option that takes a value. Returns -1 or an exit code. */
static int apply_valued(run_options *options, const char *flag,
                        const char *value, bool *kv_dtype_set,
                        bool *out_dtype_set) {
  if (strcmp(flag, "--preset") == 0) {
    options->preset = toolkit_preset_find(value);
    if (!options->preset) {
      char names[256] = "";
      int count;
      const toolkit_preset *presets = toolkit_presets(&count);
      for (int i = 0; i < count; i++) {
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                 presets[i].name);
      }
      return usage_error("unknown preset '%s' (presets: %s)", value, names);
    }
  } else if (strcmp(flag, "--phase") == 0) {
    const bool all = strcmp(value, "all") == 0;
    const bool both = all || strcmp(value, "both") == 0;
    options->run_decode = both || strcmp(value, "decode") == 0;
    options->run_prefill = both || strcmp(value, "prefill") == 0;
    options->run_verify = all || strcmp(value, "verify") == 0;
    options->run_serve = all || strcmp(value, "serve") == 0;
    if (!options->run_decode && !options->run_prefill && !options->run_verify &&
        !options->run_serve)
      return usage_error("%s must be decode, prefill, verify, serve, both or "
                         "all, not '%s'",
                         flag, value);
  } else if (strcmp(flag, "--rows") == 0) {
    return integer_option(flag, value, 1, INT64_C(1) << 24, &options->rows);
  } else if (strcmp(flag, "--kv") == 0) {
    return integer_option(flag, value, 1, INT64_C(1) << 26, &options->kv);
  } else if (strcmp(flag, "--batch") == 0) {
    return integer_option(flag, value, 1, 65536, &options->batch);
  } else if (strcmp(flag, "--dtype") == 0) {
    if (!parse_dtype(value, &options->q_dtype))
      return usage_error("%s must be f32, f16 or bf16, not '%s'", flag, value);
    if (!*kv_dtype_set) options->kv_dtype = options->q_dtype;
    if (!*out_dtype_set) options->out_dtype = options->q_dtype;
  } else if (strcmp(flag, "--kv-dtype") == 0) {
    if (!parse_kv_dtype(value, &options->kv_dtype))
      return usage_error("%s must be f32, f16, bf16, i8, u8, f8_e4m3, "
                         "f8_e5m2 or q8_0, not '%s'",
                         flag, value);
    *kv_dtype_set = true;
  } else if (strcmp(flag, "--out-dtype") == 0) {
    if (!parse_dtype(value, &options->out_dtype))
      return usage_error("%s must be f32, f16 or bf16, not '%s'", flag, value);
    *out_dtype_set = true;
  } else if (strcmp(flag, "--threads") == 0) {
    return int_option(flag, value, 0, 65536, &options->threads);
  } else if (strcmp(flag, "--isa") == 0) {
    if (!parse_isa(value, &options->max_isa))
      return usage_error("%s must be auto, scalar, avx2, avx512 or neon, "
                         "not '%s'",
                         flag, value);
  } else if (strcmp(flag, "--max-team") == 0) {
    return int_option(flag, value, 0, 65536, &options->max_team);
  } else if (strcmp(flag, "--team-level") == 0) {
    static const struct {
      const char *name;
      flashcpu_team_level level;
    } levels[] = {{"auto", FLASHCPU_TEAM_AUTO},
                  {"core", FLASHCPU_TEAM_CORE},
                  {"l2", FLASHCPU_TEAM_L2},
                  {"l3", FLASHCPU_TEAM_L3},
                  {"numa", FLASHCPU_TEAM_NUMA}};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
      if (strcmp(value, levels[i].name) == 0) {
        options->team_level = levels[i].level;
        return -1;
      }
    return usage_error("%s must be auto, core, l2, l3 or numa, not '%s'", flag,
                       value);
  } else if (strcmp(flag, "--window") == 0) {
    if (!parse_window(value, &options->window_left, &options->window_right))
      return usage_error("%s takes LEFT,RIGHT (each -1 or >= 0), not '%s'",
                         flag, value);
    options->window_set = true;
  } else if (strcmp(flag, "--softcap") == 0) {
    if (!parse_softcap(value, &options->softcap))
      return usage_error("%s must be a finite number >= 0, not '%s'", flag,
                         value);
    options->softcap_set = true;
  } else if (strcmp(flag, "--reps") == 0) {
    return int_option(flag, value, 0, 1000000, &options->reps);
  } else if (strcmp(flag, "--check-rows") == 0) {
    return int_option(flag, value, 0, 1000000, &options->check_rows);
  } else if (strcmp(flag, "--layers") == 0) {
    return int_option(flag, value, 0, 100000, &options->layers);
  } else if (strcmp(flag, "--page-size") == 0) {
    return integer_option(flag, value, 0, INT64_C(1) << 20,
                          &options->page_size);
  } else if (strcmp(flag, "--prefix") == 0) {
    return integer_option(flag, value, 0, INT64_C(1) << 26, &options->prefix);
  } else if (strcmp(flag, "--shortest") == 0) {
    return integer_option(flag, value, 0, INT64_C(1) << 26, &options->shortest);
  } else if (strcmp(flag, "--against-tune") == 0) {
    options->against_tune = value;
  } else if (strcmp(flag, "--idle-us") == 0) {
    return int_option(flag, value, 0, 10000000, &options->idle_us);
  } else if (strcmp(flag, "--wake-ahead-us") == 0) {
    return int_option(flag, value, 0, 10000000, &options->wake_ahead_us);
  }
  return -1;
}

int cli_parse_run_options(int argc, char **argv, run_options *options) {
  set_defaults(options);
  bool kv_dtype_set = false, out_dtype_set = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      cli_print_run_help(stdout);
      return CLI_EXIT_OK;
    }
    if (strcmp(arg, "--causal") == 0) {
      options->causal = 1;
      continue;
    }
    if (strcmp(arg, "--no-causal") == 0) {
      options->causal = 0;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0)
      return usage_error("unexpected argument '%s'", arg);
    /* --name=value or --name value */
    char flag[64];
    const char *value = NULL;
    const char *equals = strchr(arg, '=');
    size_t length = equals ? (size_t)(equals - arg) : strlen(arg);
    if (length >= sizeof flag) length = sizeof flag - 1;
    memcpy(flag, arg, length);
    flag[length] = '\0';
    if (!is_valued_flag(flag)) return usage_error("unknown option '%s'", flag);
    if (equals) {
      value = equals + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return usage_error("option %s needs a value", flag);
    }
    int status =
        apply_valued(options, flag, value, &kv_dtype_set, &out_dtype_set);
    if (status >= 0) return status;
  }
  if (options->wake_ahead_us > options->idle_us)
    return usage_error("--wake-ahead-us (%d) must be within --idle-us (%d)",
                       options->wake_ahead_us, options->idle_us);
  if (options->idle_us > 0 && options->against_tune)
    return usage_error("--idle-us does not apply to --against-tune (its turns "
                       "already pause, then wake each context untimed)");
  return -1;
}
