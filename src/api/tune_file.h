/* The tune file: decode kernel choice thresholds measured by `flashcpu
 * tune` on one machine, read once at context creation.
 *
 *   flashcpu-tune 1            <- the first line that is not blank or a
 *   # comments run from '#'       comment: the format and its version
 *   onepass_min_tiles = 0      <- key = value, the fc_decode_thresholds
 *   onepass_max_kv = 1024         fields; each at most once, any order;
 *   splitkv_max_rows = 8          keys left out keep their defaults
 *
 * Values are decimal integers >= 0 (splitkv_max_rows <= 64). */
#ifndef FLASHCPU_API_TUNE_FILE_H
#define FLASHCPU_API_TUNE_FILE_H

#include <stddef.h>

#include "dispatch/kernel_table.h"

/* The version this library reads. */
#define FC_TUNE_FILE_VERSION 1

/* Applies the settings in `text` (a tune file's contents) to *t; `name`
 * is the file's name for messages. Returns 0, or -1 with "NAME:LINE: what"
 * (or "NAME: what") in error; *t is then unchanged. */
int fc_tune_text_apply(const char *text, const char *name,
                       fc_decode_thresholds *t, char *error,
                       size_t error_size);

/* Reads the file at path and applies it as fc_tune_text_apply does; a
 * file that is missing, unreadable or too large (over 64 KiB) is an
 * error too. */
int fc_tune_file_apply(const char *path, fc_decode_thresholds *t, char *error,
                       size_t error_size);

#endif
