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

int fc_tune_text_apply(const char *text, const char *name, fc_settings *s,
                       const fc_cpu_features *cpu, char *error,
                       size_t error_size) {
  fc_settings result = *s;
  /* Keys seen, for duplicates: the field names are short and few. */
  char seen[8][32];
  int seen_lines[8], seen_count = 0;
  int line = 0, have_header = 0;
  for (const char *at = text; *at;) {
    line++;
    const char *newline = strchr(at, '\n');
    const char *line_end = newline ? newline : at + strlen(at);
    const char *next = newline ? newline + 1 : line_end;
    const char *hash = memchr(at, '#', (size_t)(line_end - at));
    const char *end = hash ? hash : line_end;
    const char *begin = at;
    at = next;
    while (begin < end && is_blank(*begin)) begin++;
    while (end > begin && is_blank(end[-1])) end--;
    if (begin == end) continue;
    if (!have_header) {
      const size_t header_length = strlen(FC_TUNE_HEADER);
      long long version;
      const char *v = begin + header_length;
      if ((size_t)(end - begin) <= header_length ||
          strncmp(begin, FC_TUNE_HEADER, header_length) != 0 ||
          !is_blank(*v))
        return fc_settings_error(error, error_size,
                    "%s:%d: expected the header line \"" FC_TUNE_HEADER
                    " %d\" (is this a flashcpu tune file?)",
                    name, line, FC_TUNE_FILE_VERSION);
      while (v < end && is_blank(*v)) v++;
      if (parse_count(v, end, &version) != 0)
        return fc_settings_error(error, error_size,
                    "%s:%d: the header's version \"%.*s\" is not a number",
                    name, line, (int)(end - v), v);
      if (version != FC_TUNE_FILE_VERSION)
        return fc_settings_error(error, error_size,
                    "%s:%d: tune file version %lld; this library reads "
                    "version %d (run flashcpu tune again)",
                    name, line, version, FC_TUNE_FILE_VERSION);
      have_header = 1;
      continue;
    }
    const char *equals = memchr(begin, '=', (size_t)(end - begin));
    if (!equals)
      return fc_settings_error(error, error_size,
                  "%s:%d: expected \"key = value\", got \"%.*s\"", name, line,
                  (int)(end - begin), begin);
    const char *key_end = equals, *value = equals + 1;
    while (key_end > begin && is_blank(key_end[-1])) key_end--;
    while (value < end && is_blank(*value)) value++;
    const size_t key_length = (size_t)(key_end - begin);
    const int key_shown = key_length > 64 ? 64 : (int)key_length;
    for (int k = 0; k < seen_count; k++)
      if (strlen(seen[k]) == key_length &&
          strncmp(seen[k], begin, key_length) == 0)
        return fc_settings_error(error, error_size,
                    "%s:%d: %.*s is given twice (first on line %d)", name,
                    line, key_shown, begin, seen_lines[k]);
    char message[1536];
    if (fc_settings_set(&result, cpu, begin, key_length, value,
                        (size_t)(end - value), message, sizeof message) != 0)
      return fc_settings_error(error, error_size, "%s:%d: %s", name, line, message);
    if (seen_count < 8 && key_length < sizeof seen[0]) {
      memcpy(seen[seen_count], begin, key_length);
      seen[seen_count][key_length] = '\0';
      seen_lines[seen_count++] = line;
    }
  }
  if (!have_header)
    return fc_settings_error(error, error_size,
                "%s: empty; a tune file starts with \"" FC_TUNE_HEADER
                " %d\"",
                name, FC_TUNE_FILE_VERSION);
  *s = result;
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
    result = fc_settings_error(error, error_size, "%s: cannot read (is it a directory?)",
                  path);
  else if (length > FC_TUNE_FILE_MAX_BYTES)
    result = fc_settings_error(error, error_size,
                  "%s: over %d bytes; not a flashcpu tune file", path,
                  FC_TUNE_FILE_MAX_BYTES);
  else if (memchr(text, '\0', length))
    result = fc_settings_error(error, error_size,
                  "%s: holds a NUL byte; not a flashcpu tune file", path);
  else {
    text[length] = '\0';
    result = fc_tune_text_apply(text, path, s, cpu, error, error_size);
  }
  free(text);
  return result;
}
