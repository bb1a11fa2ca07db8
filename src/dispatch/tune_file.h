/* The tune file: a machine's settings, written by `flashcpu tune` and read
 * once at context creation (the option tune_file, else FLASHCPU_TUNE_FILE).
 *
 *   flashcpu-tune 2            <- the first line that is not blank or a
 *   # comments run from '#'       comment: the format and its version
 *   splitkv_max_rows = 8       <- key = value, the keys of settings.h;
 *   decode_prefetch = l2          each at most once, any order; keys
 *                                 left out keep their defaults */
#ifndef FLASHCPU_DISPATCH_TUNE_FILE_H
#define FLASHCPU_DISPATCH_TUNE_FILE_H

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

#endif
