/* The one grammar of a context's settings, read from two places: the tune
 * file (`flashcpu tune`'s output, read once at context creation: the option
 * tune_file, else FLASHCPU_TUNE_FILE) and the options' settings string.
 *
 *   flashcpu-tune 2            <- a tune file only: its first line that is
 *   # comments run from '#'       not blank or a comment, the format and
 *   splitkv_max_rows = 8          its version
 *   decode_prefetch = l2; kernel = auto
 *
 * Entries `key = value` (the keys of settings.h) end at a newline or a
 * ';'; blanks around keys and values are ignored, empty entries skipped;
 * each key at most once, in any order; keys left out keep their values. */
#ifndef FLASHCPU_DISPATCH_TUNE_FILE_H
#define FLASHCPU_DISPATCH_TUNE_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "dispatch/settings.h"

/* The version this library reads. */
#define FC_TUNE_FILE_VERSION 2

/* Applies the settings in `text` (a tune file's contents) to *s; `name` is
 * the file's name for messages. Returns 0, or -1 with "NAME:LINE: what"
 * (or "NAME: what") in error; *s is then unchanged. */
int fc_tune_text_apply(const char *text, const char *name, fc_settings *s,
                       const fc_cpu_features *cpu, char *error,
                       size_t error_size);

/* Reads the file at path and applies it as fc_tune_text_apply does; a
 * file that is missing, unreadable or too large (over 64 KiB) is an
 * error too. */
int fc_tune_file_apply(const char *path, fc_settings *s,
                       const fc_cpu_features *cpu, char *error,
                       size_t error_size);

/* Applies the entries of a settings string (no header; "" changes
 * nothing) to *s, setting given[key] for each key it gives. Returns 0, or
 * -1 with a message naming the key and value in error; *s and given are
 * then unchanged. */
int fc_settings_text_apply(const char *text, fc_settings *s,
                           const fc_cpu_features *cpu, bool given[FC_KEY_COUNT],
                           char *error, size_t error_size);

#endif
