/* A prefetch stream that walks the rows of the next key block in address
 * order, one cache line per call. Decode reads a block head by head (a
 * head's rows are kv_heads * head_dim elements apart in a BSHD cache);
 * prefetching "the same line of the next block" with each line read would
 * send the memory system that strided order too, which a core follows
 * worse than an ascending stream. Calling fc_sweep_next once per line read
 * spreads the prefetches evenly over the block (a burst of them stalls the
 * loads behind it) and keeps the addresses ascending. Figures:
 * docs/performance.md. Portable C: the compiler's prefetch builtin. */
#ifndef FLASHCPU_KERNELS_DECODE_PREFETCH_SWEEP_H
#define FLASHCPU_KERNELS_DECODE_PREFETCH_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { FC_SWEEP_LINE = 64 };

/* Rows (outer, inner) at base + outer * outer_step + inner * inner_step,
 * each row_bytes long; inner runs fastest. */
typedef struct fc_prefetch_sweep {
  const char *line;    /* next line to prefetch */
  const char *row_end; /* end of the row being walked */
  const char *base;
  int64_t outer, inner; /* the row being walked */
  int64_t outers, inners;
  int64_t outer_step, inner_step, row_bytes;
  bool into_l1; /* fc_sweep_next's hint: L1 instead of L2 (see there) */
  bool heads_inner;
  /* Rows listed per key (a paged cache): key k of head h is at
   * key_rows[k] + offset + h * head_step; NULL: at the steps above. */
  const char *const *key_rows;
  int64_t offset, head_step;
} fc_prefetch_sweep;

static inline void fc_sweep_start_row(fc_prefetch_sweep *s) {
  const char *row;
  if (s->key_rows) {
    const int64_t key = s->heads_inner ? s->outer : s->inner;
    const int64_t head = s->heads_inner ? s->inner : s->outer;
    row = s->key_rows[key] + s->offset + head * s->head_step;
  } else {
    row = s->base + s->outer * s->outer_step + s->inner * s->inner_step;
  }
  s->line = (const char *)((uintptr_t)row & ~(uintptr_t)(FC_SWEEP_LINE - 1));
  s->row_end = row + s->row_bytes;
}

/* A sweep over keys key0 .. key0 + keys - 1 of heads head0 .. head0 +
 * heads - 1, rows of row_bytes; key_step and head_step in bytes. The
 * smaller step runs inner (address order); heads that touch (head_step ==
 * row_bytes) merge into one row per key. keys <= 0: an empty sweep. */
static inline void fc_sweep_init(fc_prefetch_sweep *s, const char *first_row,
                                 int64_t keys, int64_t heads, int64_t key_step,
                                 int64_t head_step, int64_t row_bytes) {
  s->base = first_row;
  s->outer = s->inner = 0;
  s->into_l1 = false;
  s->key_rows = NULL;
  s->offset = 0;
  s->head_step = head_step;
  if (heads > 1 && head_step == row_bytes) {
    row_bytes *= heads;
    heads = 1;
  }
  const bool heads_inner =
      heads == 1 || (head_step < 0 ? -head_step : head_step) <
                        (key_step < 0 ? -key_step : key_step);
  s->heads_inner = heads_inner;
  s->outers = heads_inner ? keys : heads;
  s->inners = heads_inner ? heads : keys;
  s->outer_step = heads_inner ? key_step : head_step;
  s->inner_step = heads_inner ? head_step : key_step;
  s->row_bytes = row_bytes;
  if (keys <= 0 || heads <= 0 || row_bytes <= 0) {
    s->outers = 0;
    s->line = s->row_end = NULL;
    return;
  }
  fc_sweep_start_row(s);
}

/* Makes a sweep set up by fc_sweep_init find its keys' rows at
 * key_rows[k] + offset (its first head) instead of at a fixed key step, as
 * the rows of a paged cache lie; nothing for an empty sweep. Heads merged
 * into one row stay merged (adjacent heads share a token's slot in every
 * page layout). */
static inline void fc_sweep_use_rows(fc_prefetch_sweep *s,
                                     const char *const *key_rows,
                                     int64_t offset) {
  if (s->outers == 0) return;
  s->key_rows = key_rows;
  s->offset = offset;
  fc_sweep_start_row(s);
}

/* Moves to the next row; false at the end of the sweep. */
static inline bool fc_sweep_next_row(fc_prefetch_sweep *s) {
  if (s->outer >= s->outers) return false;
  if (++s->inner == s->inners) {
    s->inner = 0;
    if (++s->outer == s->outers) return false;
  }
  fc_sweep_start_row(s);
  return true;
}

/* The sweep's next line, NULL once it is done. */
static inline __attribute__((always_inline)) const char *
fc_sweep_take(fc_prefetch_sweep *s) {
  if (s->line >= s->row_end && !fc_sweep_next_row(s)) return NULL;
  const char *line = s->line;
  s->line += FC_SWEEP_LINE;
  return line;
}

/* Prefetches the sweep's next line (nothing once it is done). By default
 * with the lowest temporal hint that still caches it (prefetcht2 on x86:
 * into L2): a block of every head is 64 KiB of K and V, more than L1
 * holds, and the hint does not hold one of the core's few L1 fill buffers
 * for a whole memory latency. into_l1 (the kernel table's choice: AMD
 * CPUs) prefetches into L1, faster there; the non-temporal hint is slower
 * everywhere (docs/performance.md). The branch is on a field the loop
 * keeps in a register and never changes within a call. */
static inline __attribute__((always_inline)) void
fc_sweep_next(fc_prefetch_sweep *s) {
  const char *line = fc_sweep_take(s);
  if (!line) return;
  if (s->into_l1)
    __builtin_prefetch(line, 0, 3);
  else
    __builtin_prefetch(line, 0, 1);
}

/* A copy of *s (an empty sweep for NULL) for a loop to advance, written
 * back after it: advanced through a pointer that the loop's loads may
 * alias (rows read through char pointers), the sweep would be stored back
 * at every line; a local copy stays in registers. */
static inline fc_prefetch_sweep fc_sweep_copy(const fc_prefetch_sweep *s) {
  if (s) return *s;
  fc_prefetch_sweep empty;
  memset(&empty, 0, sizeof empty);
  return empty;
}

/* Prefetches every line of the sweep at once, into L1: for a tile's first
 * block, which no earlier block prefetched and which is read next (address
 * order still beats the kernel's head-by-head demand misses). */
static inline void fc_sweep_all(fc_prefetch_sweep *s) {
  for (const char *line = fc_sweep_take(s); line; line = fc_sweep_take(s))
    __builtin_prefetch(line, 0, 3);
}

#endif
