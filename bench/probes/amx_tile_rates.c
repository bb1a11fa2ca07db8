/* flashcpu_amx_tile_rates: the AMX prefill kernel's tile patterns, one core,
 * operands in L1 or L2, timed apart from its vector work, to see how far
 * each pattern stays from TDPBF16PS's rate with its operands in registers.
 * Every pattern runs 2 x 2 accumulator tiles (tmm0-3) fed by two A and two
 * B tiles (tmm4-7), as the kernel does:
 *   registers   TDPBF16PS only, operands loaded once (the unit's rate)
 *   qk          S^T of 32 keys x 32 slots: zero, four steps of 32 d (two
 *               1 KiB K tiles, two Q pair tiles 128 bytes a row), store
 *   qk-orders   the same with each load issued just before the first
 *               product that reads it
 *   qk-keep     qk with the accumulators zeroed and stored once per 64
 *               calls: what a call's zeroing and storing cost
 *   qk-l2       qk walking a 48 KiB K block and six 8 KiB Q blocks (the
 *               kernel's working set: six register blocks per KV block)
 *   qk-l2-fetch qk-l2 with the next call's K slab prefetched into L1
 *   qk-l2-pairs qk-l2 with two register blocks per K slab, so that the
 *               second reads the slab from L1
 *   pv          O^T of 32 columns x 32 slots: load, six steps of 32 keys
 *               (two V^T tiles, two P pair tiles), store
 *   pv-l2       pv over a 48 KiB V^T block and six O^T and P blocks
 *   pv-l2-fetch pv-l2 with the next column group's V^T prefetched into L1
 *   pv-l2-pairs pv-l2 with two register blocks per V^T column group
 *   qk-wide-l2  qk-l2 on register blocks of 64 slots, 1 x 4 accumulators:
 *               S^T of 16 keys x 64 slots, each K tile (from the L2 block)
 *               feeding four products, the Q pair tiles of the two 32-slot
 *               halves loaded in turn (five tile loads per four products)
 *   pv-wide-l2  pv-l2 likewise: O^T of 16 columns x 64 slots, each V^T
 *               tile feeding four products
 *   reg+N fma   registers with N independent vector FMAs (8 chains)
 *               issued per four TDPBF16PS: how much AVX-512 work runs
 *               free beside the tiles (on an Intel Xeon, about 64: while
 *               the tiles run, one of the two AVX-512 ports issues)
 * Prints nanoseconds of the thread's CPU time per TDPBF16PS (median of
 * --reps), GFLOP/s (16 x 16 x 32 multiply-adds a product) and each
 * pattern's rate as a share of the registers pattern's. */
#define _GNU_SOURCE /* syscall */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/ceiling_kernels.h"
#include "common/timer.h"

enum { TILE = 16 * 32, BLOCKS = 6, REPS_MAX = 99 };

typedef struct buffers {
  uint16_t *k;  /* BLOCKS slabs of 32 keys x 128 d as tiles (48 KiB) */
  uint16_t *q;  /* BLOCKS Q pair blocks [64][32 slots][2] (8 KiB each) */
  float *s;     /* BLOCKS S^T blocks [32][32] (4 KiB each) */
  uint16_t *vt; /* V^T: 8 column groups x 6 key chunks as tiles */
  uint16_t *p;  /* BLOCKS P pair blocks [96][32][2] (12 KiB each) */
  float *o;     /* BLOCKS O^T blocks [128][32] (16 KiB each) */
} buffers;

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE void qk(const uint16_t *k, const uint16_t *q, float *s, int zero,
                      int store, int interleaved, const uint16_t *fetch) {
  if (zero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int d = 0; d < 4; d++) {
    const uint16_t *a0 = k + d * TILE, *a1 = k + (4 + d) * TILE;
    if (fetch) /* a quarter of the next 8 KiB slab into L1 */
      for (int line = 0; line < 32; line++)
        _mm_prefetch((const char *)fetch + (d * 32 + line) * 64, _MM_HINT_T0);
    const uint16_t *b = q + d * 16 * 64;
    if (interleaved) {
      _tile_loadd(4, a0, 64);
      _tile_loadd(6, b, 128);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, b + 32, 128);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a1, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_loadd(4, a0, 64);
      _tile_loadd(5, a1, 64);
      _tile_loadd(6, b, 128);
      _tile_loadd(7, b + 32, 128);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  if (store) {
    _tile_stored(0, s, 128);
    _tile_stored(1, s + 16, 128);
    _tile_stored(2, s + 16 * 32, 128);
    _tile_stored(3, s + 16 * 32 + 16, 128);
  }
}

/* qk as two halves of 16 slots, each on its own two accumulators
 * (tmm0-1, then tmm2-3) and Q tile (tmm6, then tmm7), so that one half's
 * stores drain while the other's products run; K tiles load twice. */
ALWAYS_INLINE void qk_halves(const uint16_t *k, const uint16_t *q, float *s) {
  _tile_zero(0);
  _tile_zero(1);
  for (int d = 0; d < 4; d++) {
    _tile_loadd(4, k + d * TILE, 64);
    _tile_loadd(5, k + (4 + d) * TILE, 64);
    _tile_loadd(6, q + d * 16 * 64, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
  }
  _tile_stored(0, s, 128);
  _tile_stored(1, s + 16 * 32, 128);
  _tile_zero(2);
  _tile_zero(3);
  for (int d = 0; d < 4; d++) {
    _tile_loadd(4, k + d * TILE, 64);
    _tile_loadd(5, k + (4 + d) * TILE, 64);
    _tile_loadd(7, q + d * 16 * 64 + 32, 128);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(2, s + 16, 128);
  _tile_stored(3, s + 16 * 32 + 16, 128);
}

ALWAYS_INLINE void pv(const uint16_t *vt, const uint16_t *p, float *o,
                      const uint16_t *fetch) {
  _tile_loadd(0, o, 128);
  _tile_loadd(1, o + 16, 128);
  _tile_loadd(2, o + 16 * 32, 128);
  _tile_loadd(3, o + 16 * 32 + 16, 128);
  for (int j = 0; j < 6; j++) {
    if (fetch) /* a sixth of the next 12 KiB V^T column group into L1 */
      for (int line = 0; line < 32; line++)
        _mm_prefetch((const char *)fetch + (j * 32 + line) * 64, _MM_HINT_T0);
    _tile_loadd(4, vt + j * TILE, 64);
    _tile_loadd(5, vt + (6 + j) * TILE, 64);
    _tile_loadd(6, p + j * 16 * 64, 128);
    _tile_loadd(7, p + j * 16 * 64 + 32, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, o, 128);
  _tile_stored(1, o + 16, 128);
  _tile_stored(2, o + 16 * 32, 128);
  _tile_stored(3, o + 16 * 32 + 16, 128);
}

/* steps of the wide products into tmm0-3: one tile a per step (rows of 64
 * bytes) feeds both 32-slot halves of the pair tiles b0 and b1, which take
 * tmm5-7 in turn. */
ALWAYS_INLINE void wide_steps(const uint16_t *a, const uint16_t *b0,
                              const uint16_t *b1, int steps) {
  for (int j = 0; j < steps; j++) {
    _tile_loadd(4, a + j * TILE, 64);
    _tile_loadd(5, b0 + j * 16 * 64, 128);
    _tile_loadd(6, b0 + j * 16 * 64 + 32, 128);
    _tile_loadd(7, b1 + j * 16 * 64, 128);
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, b1 + j * 16 * 64 + 32, 128);
    _tile_dpbf16ps(3, 4, 5);
  }
}

/* tmm0-3 into rows of 64 floats. */
ALWAYS_INLINE void store_wide(float *c) {
  _tile_stored(0, c, 256);
  _tile_stored(1, c + 16, 256);
  _tile_stored(2, c + 32, 256);
  _tile_stored(3, c + 48, 256);
}

/* S^T of 16 keys x 64 slots (1 x 4 accumulators) over four steps of 32 d,
 * halves q0 and q1. s: rows of 64 floats. */
ALWAYS_INLINE void qk_wide(const uint16_t *k, const uint16_t *q0,
                           const uint16_t *q1, float *s) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  wide_steps(k, q0, q1, 4);
  store_wide(s);
}

/* O^T of 16 columns x 64 slots over six steps of 32 keys: one V^T tile
 * per step feeds the products of both halves' P pairs p0 and p1. o: rows
 * of 64 floats. */
ALWAYS_INLINE void pv_wide(const uint16_t *vt, const uint16_t *p0,
                           const uint16_t *p1, float *o) {
  _tile_loadd(0, o, 256);
  _tile_loadd(1, o + 16, 256);
  _tile_loadd(2, o + 32, 256);
  _tile_loadd(3, o + 48, 256);
  wide_steps(vt, p0, p1, 6);
  store_wide(o);
}

typedef enum pattern {
  REGISTERS,
  QK,
  QK_ORDERED,
  QK_KEEP,
  QK_HALVES,
  QK_L2,
  QK_L2_FETCH,
  QK_L2_PAIRS,
  QK_L2_HALVES,
  PV,
  PV_L2,
  PV_L2_FETCH,
  PV_L2_PAIRS,
  QK_WIDE_L2,
  PV_WIDE_L2,
  REG_FMA32,
  REG_FMA64,
  REG_FMA96,
  REG_FMA128,
  PATTERNS
} pattern;
static const char *const names[PATTERNS] = {
    "registers", "qk",          "qk-ordered",  "qk-keep",      "qk-halves",
    "qk-l2",     "qk-l2-fetch", "qk-l2-pairs", "qk-l2-halves", "pv",
    "pv-l2",     "pv-l2-fetch", "pv-l2-pairs", "qk-wide-l2",   "pv-wide-l2",
    "reg+32fma", "reg+64fma",   "reg+96fma",   "reg+128fma"};

static volatile float
    fma_sink; /* keeps the FMAs of registers_with_fmas alive */

/* TDPBF16PS with its operands in registers, with `fmas` FMAs (a multiple
 * of 8, in 8 independent chains; 0 for the registers pattern) after every
 * four. */
static void registers_with_fmas(const buffers *b, int64_t calls, int fmas) {
  __m512 acc[8];
  for (int i = 0; i < 8; i++) acc[i] = _mm512_set1_ps(0.001f * (float)i);
  const __m512 half = _mm512_set1_ps(0.5f), quarter = _mm512_set1_ps(0.25f);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, b->k, 64);
  _tile_loadd(5, b->k + TILE, 64);
  _tile_loadd(6, b->q, 128);
  _tile_loadd(7, b->q + 32, 128);
  for (int64_t i = 0; i < calls * 4; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    for (int f = 0; f < fmas; f += 8)
      for (int c = 0; c < 8; c++)
        acc[c] = _mm512_fmadd_ps(acc[c], half, quarter);
  }
  _tile_stored(0, b->s, 128);
  for (int c = 1; c < 8; c++) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  fma_sink = _mm512_reduce_add_ps(acc[0]);
}

/* One pass of `calls` calls of the pattern; returns products issued. */
static int64_t run(pattern which, const buffers *b, int64_t calls) {
  toolkit_amx_configure();
  int64_t products = 0;
  switch (which) {
  case REGISTERS:
    registers_with_fmas(b, calls, 0);
    products = calls * 16;
    break;
  case QK:
    for (int64_t i = 0; i < calls; i++) qk(b->k, b->q, b->s, 1, 1, 0, NULL);
    products = calls * 16;
    break;
  case QK_ORDERED:
    for (int64_t i = 0; i < calls; i++) qk(b->k, b->q, b->s, 1, 1, 1, NULL);
    products = calls * 16;
    break;
  case QK_KEEP:
    for (int64_t i = 0; i < calls; i++)
      qk(b->k, b->q, b->s, i % 64 == 0, i % 64 == 63, 0, NULL);
    products = calls * 16;
    break;
  case QK_L2:
  case QK_L2_FETCH:
    /* register block outer, slab inner: the kernel's order */
    for (int64_t i = 0; i < calls; i += BLOCKS * BLOCKS)
      for (int r = 0; r < BLOCKS; r++)
        for (int slab = 0; slab < BLOCKS; slab++)
          qk(b->k + slab * 8 * TILE, b->q + r * 64 * 64,
             b->s + (r * BLOCKS + slab) % BLOCKS * 1024, 1, 1, 0,
             which == QK_L2_FETCH ? b->k + (slab + 1) % BLOCKS * 8 * TILE
                                  : NULL);
    products = (calls / (BLOCKS * BLOCKS)) * BLOCKS * BLOCKS * 16;
    break;
  case QK_HALVES:
    for (int64_t i = 0; i < calls; i++) qk_halves(b->k, b->q, b->s);
    products = calls * 16;
    break;
  case QK_L2_HALVES:
    for (int64_t i = 0; i < calls; i += BLOCKS * BLOCKS)
      for (int r = 0; r < BLOCKS; r++)
        for (int slab = 0; slab < BLOCKS; slab++)
          qk_halves(b->k + slab * 8 * TILE, b->q + r * 64 * 64,
                    b->s + (r * BLOCKS + slab) % BLOCKS * 1024);
    products = (calls / (BLOCKS * BLOCKS)) * BLOCKS * BLOCKS * 16;
    break;
  case QK_L2_PAIRS:
    /* two register blocks per slab: the second reads K from L1 */
    for (int64_t i = 0; i < calls; i += BLOCKS * BLOCKS)
      for (int r = 0; r < BLOCKS; r += 2)
        for (int slab = 0; slab < BLOCKS; slab++)
          for (int twin = 0; twin < 2; twin++)
            qk(b->k + slab * 8 * TILE, b->q + (r + twin) * 64 * 64,
               b->s + ((r + twin) * BLOCKS + slab) % BLOCKS * 1024, 1, 1, 0,
               NULL);
    products = (calls / (BLOCKS * BLOCKS)) * BLOCKS * BLOCKS * 16;
    break;
  case PV_L2_PAIRS:
    for (int64_t i = 0; i < calls; i += 4 * BLOCKS)
      for (int r = 0; r < BLOCKS; r += 2)
        for (int c = 0; c < 4; c++)
          for (int twin = 0; twin < 2; twin++)
            pv(b->vt + c * 12 * TILE, b->p + (r + twin) * 96 * 64,
               b->o + (r + twin) * 4096 + c * 1024, NULL);
    products = (calls / (4 * BLOCKS)) * 4 * BLOCKS * 24;
    break;
  case PV:
    for (int64_t i = 0; i < calls; i++) pv(b->vt, b->p, b->o, NULL);
    products = calls * 24;
    break;
  case PV_L2:
  case PV_L2_FETCH:
    for (int64_t i = 0; i < calls; i += 4 * BLOCKS)
      for (int r = 0; r < BLOCKS; r++)
        for (int c = 0; c < 4; c++)
          pv(b->vt + c * 12 * TILE, b->p + r * 96 * 64,
             b->o + r * 4096 + c * 1024,
             which == PV_L2_FETCH ? b->vt + (c + 1) % 4 * 12 * TILE : NULL);
    products = (calls / (4 * BLOCKS)) * 4 * BLOCKS * 24;
    break;
  case QK_WIDE_L2:
    /* three 64-slot register blocks, each over the 48 KiB K block */
    for (int64_t i = 0; i < calls; i += 36)
      for (int r = 0; r < BLOCKS / 2; r++)
        for (int t = 0; t < 12; t++)
          qk_wide(b->k + (t / 2) * 8 * TILE + (t % 2) * 4 * TILE,
                  b->q + 2 * r * 64 * 64, b->q + (2 * r + 1) * 64 * 64,
                  b->s + (t % 3) * 1024);
    products = (calls / 36) * 36 * 16;
    break;
  case PV_WIDE_L2:
    /* three 64-slot register blocks, each over eight 16-column groups */
    for (int64_t i = 0; i < calls; i += 24)
      for (int r = 0; r < BLOCKS / 2; r++)
        for (int g = 0; g < 8; g++)
          pv_wide(b->vt + (g / 2) * 12 * TILE + (g % 2) * 6 * TILE,
                  b->p + 2 * r * 96 * 64, b->p + (2 * r + 1) * 96 * 64,
                  b->o + r * 8192 + g * 16 * 64);
    products = (calls / 24) * 24 * 24;
    break;
  case REG_FMA32:
  case REG_FMA64:
  case REG_FMA96:
  case REG_FMA128:
    registers_with_fmas(b, calls, 32 * (1 + (int)(which - REG_FMA32)));
    products = calls * 16;
    break;
  default:
    break;
  }
  _tile_release();
  return products;
}

/* The thread's CPU time: on cores that other processes share, wall time
 * counts their slices too. */
static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Whether name is one of the comma-separated names in list. */
static int listed(const char *list, const char *name) {
  const size_t length = strlen(name);
  for (const char *at = list; *at;) {
    const char *end = strchr(at, ',');
    const size_t part = end ? (size_t)(end - at) : strlen(at);
    if (part == length && !strncmp(at, name, length)) return 1;
    if (!end) break;
    at = end + 1;
  }
  return 0;
}

static void *zeroed(size_t bytes) {
  void *p = aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

int main(int argc, char **argv) {
  int reps = 11;
  int64_t calls = 36 * 2000;
  const char *only = NULL; /* comma-separated names; registers always runs */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
      calls = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: flashcpu_amx_tile_rates [--reps N] [--calls N] "
                      "[--only PATTERN[,PATTERN...]]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > REPS_MAX) reps = 11;
  unsigned eax, ebx, ecx, edx;
  __asm__("cpuid"
          : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx)
          : "a"(7), "c"(0));
  if (!(edx & (1u << 22)) || !(edx & (1u << 24))) {
    fprintf(stderr, "flashcpu_amx_tile_rates: this CPU has no AMX-BF16\n");
    return 1;
  }
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
    fprintf(stderr, "flashcpu_amx_tile_rates: the kernel refused AMX\n");
    return 1;
  }
  buffers b;
  b.k = zeroed(BLOCKS * 8 * TILE * 2);
  b.q = zeroed(BLOCKS * 64 * 64 * 2);
  b.s = zeroed(BLOCKS * 1024 * 4);
  b.vt = zeroed(8 * 6 * TILE * 2);
  b.p = zeroed(BLOCKS * 96 * 64 * 2);
  b.o = zeroed(BLOCKS * 4096 * 4);
  if (!b.k || !b.q || !b.s || !b.vt || !b.p || !b.o) return 1;
  double ns[PATTERNS];
  for (int w = 0; w < PATTERNS; w++) {
    if (only && w != REGISTERS && !listed(only, names[w])) continue;
    double t[REPS_MAX];
    int64_t products = 0;
    run((pattern)w, &b, calls / 10); /* warm */
    for (int r = 0; r < reps; r++) {
      double start = cpu_seconds();
      products = run((pattern)w, &b, calls);
      t[r] = (cpu_seconds() - start) * 1e9 / (double)products;
    }
    qsort(t, (size_t)reps, sizeof t[0], compare);
    ns[w] = t[reps / 2];
    printf(
        "%-11s %7.3f ns per TDPBF16PS  %6.1f GFLOP/s  %5.1f%% of registers\n",
        names[w], ns[w], 16384.0 / ns[w], 100.0 * ns[0] / ns[w]);
  }
  return 0;
}
