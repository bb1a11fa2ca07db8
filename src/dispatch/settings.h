/* A context's settings: every choice that is not the ISA cap or the thread
 * count. Built-in defaults, then the tune file, then the options' settings
 * string, then the option fields team_level and max_team_size; the file and
 * the string share one grammar (tune_file.h) and these keys:
 *   splitkv_max_rows  0..64
 *   launch            pool | region
 *   prefill_bf16_dot  auto | on | off
 *   prefill_amx       auto | on | off
 *   decode_bf16_dot   auto | on | off
 *   decode_prefetch   auto | l1 | l2
 *   kernel            an attention kernel's name (kernels.inc), or auto
 *   team_level        auto | core | l2 | l3 | numa
 *   max_team_size     0 (no limit) .. FC_SETTINGS_MAX_TEAM_SIZE
 *   prefill_tile_slots 0 (each row's) or 16 .. FC_SETTINGS_MAX_TILE_SLOTS:
 *                     query slots per prefill tile */
#ifndef FLASHCPU_DISPATCH_SETTINGS_H
#define FLASHCPU_DISPATCH_SETTINGS_H

#include <stddef.h>

#include "dispatch/cpu_features.h"
#include "flashcpu/flashcpu.h"
#include "kernels/kernel_env.h"
#include "runtime/runtime.h"

/* Longest kernel name a setting holds; the largest max_team_size a tune
 * file may give. */
enum {
  FC_KERNEL_NAME_MAX = 96,
  FC_SETTINGS_MAX_TEAM_SIZE = 4096,
  FC_SETTINGS_MAX_TILE_SLOTS = 8192
};

typedef struct fc_settings {
  fc_kernel_settings kernel;
  fc_launch_mode launch;
  char forced_kernel[FC_KERNEL_NAME_MAX]; /* "" : choose per call */
  flashcpu_team_level team_level;         /* the team shape */
  int max_team_size;
} fc_settings;

/* Formats a message into error (error_size bytes) and returns -1: the
 * failure path of the settings and tune-file parsers. */
int fc_settings_error(char *error, size_t error_size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* The built-in defaults for this CPU. */
void fc_settings_default(fc_settings *s, const fc_cpu_features *cpu);

/* The keys, in the order the describe line lists them. */
typedef enum fc_setting_key {
  FC_KEY_SPLITKV_MAX_ROWS,
  FC_KEY_LAUNCH,
  FC_KEY_PREFILL_BF16_DOT,
  FC_KEY_PREFILL_AMX,
  FC_KEY_DECODE_BF16_DOT,
  FC_KEY_DECODE_PREFETCH,
  FC_KEY_KERNEL,
  FC_KEY_TEAM_LEVEL,
  FC_KEY_MAX_TEAM_SIZE,
  FC_KEY_PREFILL_TILE_SLOTS,
  FC_KEY_COUNT
} fc_setting_key;

/* A key's name, e.g. "splitkv_max_rows". */
const char *fc_setting_key_name(fc_setting_key key);

/* The key named by `key` (key_length bytes), or -1. */
int fc_setting_key_find(const char *key, size_t key_length);

/* Sets `key` (key_length bytes) from the text `value` (value_length
 * bytes). Returns the key's fc_setting_key, or -1 with a message in error
 * (an unknown key names the known ones; a bad value names the key, the
 * value and what the key takes). */
int fc_settings_set(fc_settings *s, const fc_cpu_features *cpu, const char *key,
                    size_t key_length, const char *value, size_t value_length,
                    char *error, size_t error_size);

/* One line "key=value ..." of every setting, for the verbose log. */
void fc_settings_describe(const fc_settings *s, char *text, size_t size);

#endif
