#include "dispatch/tune_file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FC_TUNE_FILE_MAX_BYTES (64 * 1024)
#define FC_TUNE_HEADER "flashcpu-tune"

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* A decimal integer filling [begin, end); -1 when it is not one. */
static int parse_count(const char *begin, const char *end, long long *value) {
  if (begin == end) return -1;
  long long result = 0;
  for (const char *c = begin; c < end; c++) {
    if (!isdigit((unsigned char)*c)) return -1;
    if (result > (INT64_MAX - (*c - '0')) / 10) return -1;
    result = result * 10 + (*c - '0');
  }
  *value = result;
  return 0;
}

/* Where a message points: "NAME:LINE: " in a file, nothing in a string. */
typedef struct place {
  const char *name; /* NULL: a settings string */
  int line;
} place;

static void trim(const char **begin, const char **end) {
  while (*begin < *end && is_blank(**begin)) (*begin)++;
  while (*end > *begin && is_blank((*end)[-1])) (*end)--;
}

/* The header line [begin, end) of a tune file. */
static int check_header(const char *begin, const char *end, place at,
                        char *error, size_t error_size) {
  const size_t header_length = strlen(FC_TUNE_HEADER);
  const char *v = begin + header_length;
  long long version;
  if ((size_t)(end - begin) <= header_length ||
      strncmp(begin, FC_TUNE_HEADER, header_length) != 0 || !is_blank(*v))
    return fc_settings_error(error, error_size,
                             "%s:%d: expected the header line \"" FC_TUNE_HEADER
                             " %d\" (is this a flashcpu tune file?)",
                             at.name, at.line, FC_TUNE_FILE_VERSION);
  while (v < end && is_blank(*v)) v++;
  if (parse_count(v, end, &version) != 0)
    return fc_settings_error(error, error_size,
                             "%s:%d: the header's version \"%.*s\" is not a "
                             "number",
                             at.name, at.line, (int)(end - v), v);
  if (version != FC_TUNE_FILE_VERSION)
    return fc_settings_error(error, error_size,
                             "%s:%d: tune file version %lld; this library "
                             "reads version %d (run flashcpu tune again)",
                             at.name, at.line, version, FC_TUNE_FILE_VERSION);
  return 0;
}

/* One entry [begin, end), trimmed and not empty. given_at: the line (or,
 * in a string, 1) where each key was given, 0 where not. */
static int apply_entry(const char *begin, const char *end, place at,
                       fc_settings *s, const fc_cpu_features *cpu,
                       int given_at[FC_KEY_COUNT], char *error,
                       size_t error_size) {
  char where[1024] = "";
  if (at.name) snprintf(where, sizeof where, "%s:%d: ", at.name, at.line);
  const char *equals = memchr(begin, '=', (size_t)(end - begin));
  if (!equals)
    return fc_settings_error(error, error_size,
                             "%sexpected \"key = value\", got \"%.*s\"", where,
                             (int)(end - begin > 64 ? 64 : end - begin), begin);
  const char *key_end = equals, *value = equals + 1;
  const char *key = begin;
  trim(&key, &key_end);
  trim(&value, &end);
  const size_t key_length = (size_t)(key_end - key);
  const int key_index = fc_setting_key_find(key, key_length);
  if (key_index >= 0 && given_at[key_index]) {
    if (at.name)
      return fc_settings_error(
          error, error_size, "%s%s is given twice (first on line %d)", where,
          fc_setting_key_name(key_index), given_at[key_index]);
    return fc_settings_error(error, error_size, "%s is given twice",
                             fc_setting_key_name(key_index));
  }
  char message[1536];
  if (fc_settings_set(s, cpu, key, key_length, value, (size_t)(end - value),
                      message, sizeof message) < 0)
    return fc_settings_error(error, error_size, "%s%s", where, message);
  given_at[key_index] = at.line;
  return 0;
}

/* The entries of text, after a header line when name is set (a file). */
static int apply_text(const char *text, const char *name, fc_settings *s,
                      const fc_cpu_features *cpu, int given_at[FC_KEY_COUNT],
                      char *error, size_t error_size) {
  place at = {name, 0};
  bool have_header = name == NULL;
  for (const char *line = text; *line;) {
    at.line++;
    const char *newline = strchr(line, '\n');
    const char *line_end = newline ? newline : line + strlen(line);
    const char *hash = memchr(line, '#', (size_t)(line_end - line));
    const char *begin = line, *end = hash ? hash : line_end;
    line = newline ? newline + 1 : line_end;
    trim(&begin, &end);
    if (begin == end) continue;
    if (!have_header) {
      if (check_header(begin, end, at, error, error_size) != 0) return -1;
      have_header = true;
      continue;
    }
    while (begin < end) {
      const char *semicolon = memchr(begin, ';', (size_t)(end - begin));
      const char *entry_end = semicolon ? semicolon : end, *entry = begin;
      begin = semicolon ? semicolon + 1 : end;
      trim(&entry, &entry_end);
      if (entry != entry_end && apply_entry(entry, entry_end, at, s, cpu,
                                            given_at, error, error_size) != 0)
        return -1;
    }
  }
  if (!have_header)
    return fc_settings_error(error, error_size,
                             "%s: empty; a tune file starts with "
                             "\"" FC_TUNE_HEADER " %d\"",
                             name, FC_TUNE_FILE_VERSION);
  return 0;
}

int fc_tune_text_apply(const char *text, const char *name, fc_settings *s,
                       const fc_cpu_features *cpu, char *error,
                       size_t error_size) {
  fc_settings result = *s;
  int given_at[FC_KEY_COUNT] = {0};
  if (apply_text(text, name, &result, cpu, given_at, error, error_size) != 0)
    return -1;
  *s = result;
  return 0;
}

int fc_settings_text_apply(const char *text, fc_settings *s,
                           const fc_cpu_features *cpu, bool given[FC_KEY_COUNT],
                           char *error, size_t error_size) {
  fc_settings result = *s;
  int given_at[FC_KEY_COUNT] = {0};
  if (apply_text(text, NULL, &result, cpu, given_at, error, error_size) != 0)
    return -1;
  *s = result;
  for (int k = 0; k < FC_KEY_COUNT; k++) given[k] = given_at[k] != 0;
  return 0;
}

int fc_tune_file_apply(const char *path, fc_settings *s,
                       const fc_cpu_features *cpu, char *error,
                       size_t error_size) {
  FILE *file = fopen(path, "rb");
  if (!file)
    return fc_settings_error(error, error_size, "%s: cannot open: %s", path,
                             strerror(errno));
  char *text = malloc(FC_TUNE_FILE_MAX_BYTES + 1);
  if (!text) {
    fclose(file);
    return fc_settings_error(error, error_size, "%s: out of memory", path);
  }
  size_t length = fread(text, 1, FC_TUNE_FILE_MAX_BYTES + 1, file);
  const int read_error = ferror(file);
  fclose(file);
  int result;
  if (read_error)
    result = fc_settings_error(error, error_size,
                               "%s: cannot read (is it a directory?)", path);
  else if (length > FC_TUNE_FILE_MAX_BYTES)
    result = fc_settings_error(error, error_size,
                               "%s: over %d bytes; not a flashcpu tune file",
                               path, FC_TUNE_FILE_MAX_BYTES);
  else if (memchr(text, '\0', length))
    result = fc_settings_error(error, error_size,
                               "%s: holds a NUL byte; not a flashcpu tune file",
                               path);
  else {
    text[length] = '\0';
    result = fc_tune_text_apply(text, path, s, cpu, error, error_size);
  }
  free(text);
  return result;
}
