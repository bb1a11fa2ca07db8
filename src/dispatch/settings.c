#include "dispatch/settings.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/decode/decode_splitkv.h"
#include "kernels/registry.h"

/* Split-KV up to 8 rows, the prefill kernel beyond: the crossover measured
 * with `flashcpu tune` (docs/performance.md); it depends on the cores, and
 * a default cannot depend on the thread count. */
enum { DEFAULT_SPLITKV_MAX_ROWS = 8 };

/* VDPBF16PS split-KV scores and L1 prefetches paid on AMD CPUs and lost on
 * Intel's (docs/performance.md); bf16-dot prefill lost on both. */
static bool decode_bf16_dot_default(const fc_cpu_features *cpu) {
  return cpu->vendor_amd && cpu->avx512_bf16;
}

void fc_settings_default(fc_settings *s, const fc_cpu_features *cpu) {
  memset(s, 0, sizeof *s);
  s->kernel.splitkv_max_rows = DEFAULT_SPLITKV_MAX_ROWS;
  s->kernel.prefill_bf16_dot = false;
  s->kernel.prefill_amx = true; /* where the CPU has AMX: the kernel's need */
  s->kernel.decode_bf16_dot = decode_bf16_dot_default(cpu);
  s->kernel.decode_prefetch_l1 = cpu->vendor_amd;
  s->launch = FC_LAUNCH_POOL;
  s->team_level = FLASHCPU_TEAM_AUTO;
  s->max_team_size = 0;
}

int fc_settings_error(char *error, size_t size, const char *format, ...) {
  va_list args;
  va_start(args, format);
  if (size) vsnprintf(error, size, format, args);
  va_end(args);
  return -1;
}

static int text_is(const char *text, size_t length, const char *word) {
  return strlen(word) == length && strncmp(text, word, length) == 0;
}

/* One of `words` (NULL-terminated): its index, or -1. */
static int word_index(const char *text, size_t length,
                      const char *const *words) {
  for (int i = 0; words[i]; i++)
    if (text_is(text, length, words[i])) return i;
  return -1;
}

static const char *const switch_words[] = {"auto", "on", "off", NULL};
static const char *const launch_words[] = {"pool", "region", NULL};
static const char *const prefetch_words[] = {"auto", "l1", "l2", NULL};
/* In flashcpu_team_level's order. */
static const char *const team_words[] = {"auto", "core", "l2",
                                         "l3",   "numa", NULL};

static void set_switch(bool *field, int word, bool automatic) {
  *field = word == 0 ? automatic : word == 1;
}

/* A decimal count from 0 to most (digits only); -1 for anything else. */
static long long count_in(const char *text, size_t length, long long most) {
  long long number = 0;
  size_t i = 0;
  for (; i < length && text[i] >= '0' && text[i] <= '9' && number <= most; i++)
    number = number * 10 + (text[i] - '0');
  return length == 0 || i != length || number > most ? -1 : number;
}

static const char *const key_names[FC_KEY_COUNT] = {
    "splitkv_max_rows", "launch",
    "prefill_bf16_dot", "prefill_amx",
    "decode_bf16_dot",  "decode_prefetch",
    "kernel",           "team_level",
    "max_team_size",    "prefill_tile_slots"};

const char *fc_setting_key_name(fc_setting_key key) {
  return key >= 0 && key < FC_KEY_COUNT ? key_names[key] : "?";
}

/* `kernel = NAME | auto`; an unknown name lists this build's. */
static int set_kernel(fc_settings *s, const char *value, size_t value_length,
                      char *error, size_t error_size) {
  const int shown = value_length > 64 ? 64 : (int)value_length;
  if (text_is(value, value_length, "auto")) {
    s->forced_kernel[0] = '\0';
    return FC_KEY_KERNEL;
  }
  char name[FC_KERNEL_NAME_MAX] = "";
  if (value_length < sizeof name) {
    memcpy(name, value, value_length);
    name[value_length] = '\0';
  }
  if (!fc_attention_kernel_find(name)) {
    char known[1024] = "";
    for (size_t k = 0; k < fc_attention_kernel_count; k++) {
      size_t used = strlen(known);
      snprintf(known + used, sizeof known - used, "%s%s", k ? ", " : "",
               fc_attention_kernels[k].name);
    }
    return fc_settings_error(error, error_size,
                             "kernel = \"%.*s\": no kernel of that name in "
                             "this build (auto, %s)",
                             shown, value, known);
  }
  memcpy(s->forced_kernel, name, value_length + 1);
  return FC_KEY_KERNEL;
}

int fc_setting_key_find(const char *key, size_t key_length) {
  for (int k = 0; k < FC_KEY_COUNT; k++)
    if (text_is(key, key_length, key_names[k])) return k;
  return -1;
}

int fc_settings_set(fc_settings *s, const fc_cpu_features *cpu, const char *key,
                    size_t key_length, const char *value, size_t value_length,
                    char *error, size_t error_size) {
  const int shown = value_length > 64 ? 64 : (int)value_length;
  const int found = fc_setting_key_find(key, key_length);
  int word = -1;
  long long number = -1;
  switch (found) {
  case FC_KEY_SPLITKV_MAX_ROWS:
    if ((number = count_in(value, value_length, FC_SPLITKV_MAX_ROWS)) < 0)
      return fc_settings_error(error, error_size,
                               "splitkv_max_rows = \"%.*s\": expected an "
                               "integer from 0 to %d",
                               shown, value, FC_SPLITKV_MAX_ROWS);
    s->kernel.splitkv_max_rows = number;
    return found;
  case FC_KEY_LAUNCH:
    if ((word = word_index(value, value_length, launch_words)) < 0)
      return fc_settings_error(error, error_size,
                               "launch = \"%.*s\": expected pool or region",
                               shown, value);
    s->launch = word == 0 ? FC_LAUNCH_POOL : FC_LAUNCH_REGION;
    return found;
  case FC_KEY_PREFILL_BF16_DOT:
  case FC_KEY_PREFILL_AMX:
  case FC_KEY_DECODE_BF16_DOT:
    if ((word = word_index(value, value_length, switch_words)) < 0)
      return fc_settings_error(error, error_size,
                               "%s = \"%.*s\": expected auto, on or off",
                               key_names[found], shown, value);
    if (found == FC_KEY_PREFILL_BF16_DOT)
      set_switch(&s->kernel.prefill_bf16_dot, word, false);
    else if (found == FC_KEY_PREFILL_AMX)
      set_switch(&s->kernel.prefill_amx, word, true);
    else
      set_switch(&s->kernel.decode_bf16_dot, word,
                 decode_bf16_dot_default(cpu));
    return found;
  case FC_KEY_DECODE_PREFETCH:
    if ((word = word_index(value, value_length, prefetch_words)) < 0)
      return fc_settings_error(error, error_size,
                               "decode_prefetch = \"%.*s\": expected auto, "
                               "l1 or l2",
                               shown, value);
    s->kernel.decode_prefetch_l1 = word == 0 ? cpu->vendor_amd : word == 1;
    return found;
  case FC_KEY_KERNEL:
    return set_kernel(s, value, value_length, error, error_size);
  case FC_KEY_TEAM_LEVEL:
    if ((word = word_index(value, value_length, team_words)) < 0)
      return fc_settings_error(error, error_size,
                               "team_level = \"%.*s\": expected auto, core, "
                               "l2, l3 or numa",
                               shown, value);
    s->team_level = (flashcpu_team_level)word;
    return found;
  case FC_KEY_MAX_TEAM_SIZE:
    if ((number = count_in(value, value_length, FC_SETTINGS_MAX_TEAM_SIZE)) < 0)
      return fc_settings_error(error, error_size,
                               "max_team_size = \"%.*s\": expected 0 (no "
                               "limit) or a team size up to %d",
                               shown, value, FC_SETTINGS_MAX_TEAM_SIZE);
    s->max_team_size = (int)number;
    return found;
  case FC_KEY_PREFILL_TILE_SLOTS:
    if ((number = count_in(value, value_length, FC_SETTINGS_MAX_TILE_SLOTS)) <
            0 ||
        (number > 0 && number < 16))
      return fc_settings_error(error, error_size,
                               "prefill_tile_slots = \"%.*s\": expected 0 "
                               "(each kernel's own) or 16 to %d",
                               shown, value, FC_SETTINGS_MAX_TILE_SLOTS);
    s->kernel.prefill_tile_slots = number;
    return found;
  default: {
    const int key_shown = key_length > 64 ? 64 : (int)key_length;
    return fc_settings_error(error, error_size,
                             "unknown key \"%.*s\" (known: splitkv_max_rows, "
                             "launch, prefill_bf16_dot, prefill_amx, "
                             "decode_bf16_dot, decode_prefetch, kernel, "
                             "team_level, max_team_size, prefill_tile_slots)",
                             key_shown, key);
  }
  }
}

void fc_settings_describe(const fc_settings *s, char *text, size_t size) {
  const int level = (int)s->team_level;
  snprintf(text, size,
           "splitkv_max_rows=%lld launch=%s prefill_bf16_dot=%s "
           "prefill_amx=%s decode_bf16_dot=%s decode_prefetch=%s kernel=%s "
           "team_level=%s max_team_size=%d prefill_tile_slots=%lld",
           (long long)s->kernel.splitkv_max_rows,
           s->launch == FC_LAUNCH_POOL ? "pool" : "region",
           s->kernel.prefill_bf16_dot ? "on" : "off",
           s->kernel.prefill_amx ? "on" : "off",
           s->kernel.decode_bf16_dot ? "on" : "off",
           s->kernel.decode_prefetch_l1 ? "l1" : "l2",
           s->forced_kernel[0] ? s->forced_kernel : "auto",
           level >= 0 && level <= FLASHCPU_TEAM_NUMA ? team_words[level] : "?",
           s->max_team_size, (long long)s->kernel.prefill_tile_slots);
}
