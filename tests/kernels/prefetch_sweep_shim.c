/* Exposes the decode kernels' prefetch sweep (static inline C in
 * src/kernels/decode/prefetch_sweep.h) to the C++ test: the lines a sweep
 * hands out, in order. */
#include <stdint.h>

#include "kernels/decode/prefetch_sweep.h"

/* Takes every line of the sweep, the first `capacity` into lines; returns
 * how many there were. */
static int64_t take_all(fc_prefetch_sweep *sweep, const char **lines,
                        int64_t capacity) {
  int64_t count = 0;
  for (const char *line = fc_sweep_take(sweep); line;
       line = fc_sweep_take(sweep)) {
    if (count < capacity) lines[count] = line;
    count++;
  }
  return count;
}

int64_t fctest_sweep_lines(const char *first_row, int64_t keys, int64_t heads,
                           int64_t key_step, int64_t head_step,
                           int64_t row_bytes, const char **lines,
                           int64_t capacity) {
  fc_prefetch_sweep sweep;
  fc_sweep_init(&sweep, first_row, keys, heads, key_step, head_step, row_bytes);
  return take_all(&sweep, lines, capacity);
}

/* The same for rows listed per key (a paged cache): key k's first head at
 * key_rows[k], its heads head_step apart; the sweep is set up with the
 * key step of a contiguous cache first, as the kernels do, then given the
 * rows. */
int64_t fctest_sweep_lines_listed(const char *const *key_rows, int64_t keys,
                                  int64_t heads, int64_t head_step,
                                  int64_t row_bytes, const char **lines,
                                  int64_t capacity) {
  fc_prefetch_sweep sweep;
  fc_sweep_init(&sweep, key_rows[0], keys, heads, heads * head_step, head_step,
                row_bytes);
  fc_sweep_use_rows(&sweep, key_rows, 0);
  return take_all(&sweep, lines, capacity);
}
