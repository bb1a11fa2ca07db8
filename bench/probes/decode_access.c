/* flashcpu_decode_access: the split-KV decode kernel's memory access
 * pattern without its arithmetic, to see what one core (or several) waits
 * on. It reads decode-shaped bf16 K/V caches (BSHD: key, head, dim),
 * rotated over layers that together exceed the last-level cache, the way
 * the kernel's widest tiles do (every kv head, 16-key blocks, head by head;
 * each thread a contiguous key range of each layer), in these orders:
 *   stream    the thread's K range, then its V range, in address order
 *   blocks    the kernel's order, no software prefetch
 *   sweep-t2  the kernel's order with its prefetch sweep of the next block
 *             (prefetcht2, one line per line read; first block in a burst)
 *   sweep-t0  the same with prefetcht0
 *   sweep-ptr sweep-t2 advanced through the caller's pointer rather than a
 *             local copy, as the kernels once did (a store of the
 *             sweep per line; measured the same as sweep-t2)
 *   sweep-near sweep-t2, and each line read also prefetches into L1 the
 *             same line of the matching row of the set read next (a head's
 *             V rows while its K rows are read, the next head's K rows
 *             while its V rows are), so that the reads find their lines in
 *             L1 (measured no faster than sweep-t2)
 *   sweep-pages sweep-t2, and at each block one line of every 4 KiB page
 *             the block after the next touches, so that its translations
 *             and the hardware's streams start early
 * --work N (0..8, 12 or 16; beyond, the compiler spills the accumulators
 * and the probe times its stack) adds N vector FMAs per 64-byte line read
 * (the kernel does about 8 for bf16 K/V with GQA 4: 64 per key and head;
 * 16 for 8-bit rows, plus their widening), so
 * the overlap of memory and arithmetic can be seen apart from either;
 * --footprint-mb small enough for the caches gives the arithmetic alone.
 * --serial 1 makes each head's V arithmetic wait for a reduction of its K
 * sums (the softmax's place in the kernel), 2 the next K rows' for V's too
 * (head by head only: --group >= --block).
 * --page N keeps each layer's K and V in pages of N keys, the pages in a
 * random order (a paged cache's block table; the sweeps then take the
 * listed rows, as the kernel's do); 0, the default, contiguous.
 * --ahead N sweeps the block N blocks ahead instead of the next (the first
 * N blocks prefetched at once).
 * --huge 1 asks for transparent huge pages for the caches (madvise), to
 * tell what the TLB costs apart from the order.
 * --clock cpu times the calling thread's CPU time instead of wall time
 * (one thread on a shared machine: time another process took is left out).
 * Prints GB/s (median of --reps passes over every layer) per order and the
 * read ceiling of the same thread count (the `flashcpu run` ceiling). */
#define _GNU_SOURCE /* madvise */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/ceilings.h"
#include "common/quiet_openmp.h"
#include "common/timer.h"
#include "kernels/decode/prefetch_sweep.h"

enum { MAX_REPS = 101 };

typedef enum order {
  STREAM,
  BLOCKS,
  SWEEP_T2,
  SWEEP_T0,
  SWEEP_PTR,
  SWEEP_NEAR,
  SWEEP_PAGES,
  ORDERS
} order;
static const char *const order_names[ORDERS] = {
    "stream",    "blocks",     "sweep-t2",   "sweep-t0",
    "sweep-ptr", "sweep-near", "sweep-pages"};

typedef struct shape {
  int64_t kv, heads, dim; /* keys, kv heads, head_dim (bf16 elements) */
  int64_t layers;
  int64_t block; /* keys per block: the prefetch sweep's unit */
  int64_t group; /* keys read per head in turn (block: K, V head by head) */
  int work;      /* vector FMAs per line read */
  int serial;    /* 1: a reduction every K row set waits for; 2: V's too */
  int64_t page;  /* keys per page, 0: contiguous */
  int64_t ahead; /* blocks between a block and the one its sweeps fetch */
  const int64_t *slot_of_page; /* page p's place in the pool */
} shape;

/* Even lines' FMAs go to acc[0..7], odd lines' to acc[8..15] in turn: 16
 * independent chains per step of two lines, so any `work` costs the FMAs'
 * throughput, not the latency of a chain. */
typedef struct sink {
  __m512 acc[16];
} sink;

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Two 64-byte lines read, `work` FMAs on each. */
static ALWAYS_INLINE void take_2_lines(__m512 acc[16], const char *line,
                                       int work) {
  const __m512 x = _mm512_loadu_ps((const float *)line);
  const __m512 y = _mm512_loadu_ps((const float *)(line + FC_SWEEP_LINE));
  for (int i = 0; i < work; i++) {
    acc[i % 8] = _mm512_fmadd_ps(acc[i % 8], x, x);
    acc[8 + i % 8] = _mm512_fmadd_ps(acc[8 + i % 8], y, y);
  }
  if (work == 0) {
    acc[0] = _mm512_add_ps(acc[0], x);
    acc[8] = _mm512_add_ps(acc[8], y);
  }
}

static ALWAYS_INLINE void prefetch_next(fc_prefetch_sweep *next, int hint) {
  if (!next) return;
  const char *line = fc_sweep_take(next);
  if (line && hint == 3)
    __builtin_prefetch(line, 0, 3);
  else if (line)
    __builtin_prefetch(line, 0, 1);
}

static ALWAYS_INLINE void read_range(sink *s, const char *first, int64_t bytes,
                                     int work) {
  __m512 acc[16];
  memcpy(acc, s->acc, sizeof acc);
  for (int64_t b = 0; b < bytes; b += 2 * FC_SWEEP_LINE)
    take_2_lines(acc, first + b, work);
  memcpy(s->acc, acc, sizeof acc);
}

/* Head h's row of key `key` in a [keys][heads][dim] bf16 cache (paged:
 * [pages][page][heads][dim], key's page where the block table puts it). */
static ALWAYS_INLINE const char *row_of(const char *base, const shape *sh,
                                        int64_t key, int64_t h) {
  const int64_t row = sh->dim * 2;
  if (sh->page)
    key = sh->slot_of_page[key / sh->page] * sh->page + key % sh->page;
  return base + (key * sh->heads + h) * row;
}

/* Head h's rows of keys [key, key + n), with a line of `next` prefetched
 * per line read (hint: __builtin_prefetch's locality; next NULL: none;
 * shared: advance *next itself rather than a local copy, as the kernel
 * once did). */
static ALWAYS_INLINE void read_rows(sink *s, const char *base, const shape *sh,
                                    int64_t key, int64_t n, int64_t h,
                                    fc_prefetch_sweep *next, int hint,
                                    bool shared, int work, const char *near) {
  const int64_t row = sh->dim * 2, key_step = sh->heads * row;
  fc_prefetch_sweep sweep;
  if (next) sweep = *next;
  fc_prefetch_sweep *walk = next && !shared ? &sweep : next;
  __m512 acc[16];
  memcpy(acc, s->acc, sizeof acc);
  for (int64_t j = 0; j < n; j++) {
    const char *r = row_of(base, sh, key + j, h);
    for (int64_t b = 0; b < row; b += 2 * FC_SWEEP_LINE) {
      prefetch_next(walk, hint);
      prefetch_next(walk, hint);
      if (near) { /* near: row 0 of the set read next */
        __builtin_prefetch(near + j * key_step + b, 0, 3);
        __builtin_prefetch(near + j * key_step + b + FC_SWEEP_LINE, 0, 3);
      }
      take_2_lines(acc, r + b, work);
    }
  }
  memcpy(s->acc, acc, sizeof acc);
  if (next && !shared) *next = sweep;
}

/* rows: room for a block's keys, which a paged sweep walks. */
static void block_sweep(fc_prefetch_sweep *sw, const char *base,
                        const shape *sh, int64_t key, int64_t end,
                        const char **rows) {
  const int64_t row = sh->dim * 2;
  const int64_t n = end - key < sh->block ? end - key : sh->block;
  fc_sweep_init(sw, key < end ? row_of(base, sh, key, 0) : NULL, n, sh->heads,
                sh->heads * row, row, row);
  if (!sh->page || key >= end) return;
  for (int64_t j = 0; j < n; j++) rows[j] = row_of(base, sh, key + j, 0);
  fc_sweep_use_rows(sw, rows, 0);
}

/* The softmax between a head's scores and its values, as a dependency:
 * every accumulator waits for the maximum of the sums so far (x + m * 0
 * is x for finite m), so the next rows' arithmetic cannot start before
 * the rows read so far are in and summed. Their loads still can. */
static ALWAYS_INLINE void wait_for_sums(sink *s) {
  const __m512 dep = _mm512_set1_ps(_mm512_reduce_max_ps(s->acc[0]) * 0.0f);
  for (int i = 0; i < 16; i++) s->acc[i] = _mm512_add_ps(s->acc[i], dep);
}

/* One thread's keys [begin, end) of one layer. */
static ALWAYS_INLINE void read_layer_with(sink *s, const char *k, const char *v,
                                          const shape *sh, int64_t begin,
                                          int64_t end, order o, int work) {
  const int64_t key_bytes = sh->heads * sh->dim * 2;
  if (o == STREAM && sh->page) { /* page by page in the table's order */
    for (int c = 0; c < 2; c++)
      for (int64_t key = begin; key < end;) {
        int64_t run = sh->page - key % sh->page;
        if (run > end - key) run = end - key;
        read_range(s, row_of(c ? v : k, sh, key, 0), run * key_bytes, work);
        key += run;
      }
    return;
  }
  if (o == STREAM) {
    read_range(s, k + begin * key_bytes, (end - begin) * key_bytes, work);
    read_range(s, v + begin * key_bytes, (end - begin) * key_bytes, work);
    return;
  }
  /* The rows of the first block, the current and the next (paged). */
  const char **rows = malloc(4 * (size_t)sh->block * sizeof *rows);
  if (!rows) return;
  const bool prefetch = o != BLOCKS;
  const bool shared = o == SWEEP_PTR;
  const int hint = o == SWEEP_T0 ? 3 : 1;
  for (int64_t a = 0; prefetch && a < sh->ahead && begin < end; a++) {
    fc_prefetch_sweep fk, fv;
    block_sweep(&fk, k, sh, begin + a * sh->block, end, rows);
    block_sweep(&fv, v, sh, begin + a * sh->block, end, rows + sh->block);
    fc_sweep_all(&fk);
    fc_sweep_all(&fv);
  }
  for (int64_t key = begin; key < end; key += sh->block) {
    const int64_t n = end - key < sh->block ? end - key : sh->block;
    if (o == SWEEP_PAGES) /* the 4 KiB pages of the block after the next */
      for (int c = 0; c < 2; c++) {
        uintptr_t last = 0;
        const int64_t far = key + (sh->ahead + 1) * sh->block;
        for (int64_t j = far; j < far + sh->block && j < end; j++) {
          const char *r = row_of(c ? v : k, sh, j, 0);
          const uintptr_t first = (uintptr_t)r >> 12;
          const uintptr_t after = ((uintptr_t)r + key_bytes - 1) >> 12;
          for (uintptr_t page = first; page <= after; page++)
            if (page != last) {
              __builtin_prefetch(page == first ? r : (const char *)(page << 12),
                                 0, 1);
              last = page;
            }
        }
      }
    fc_prefetch_sweep nk, nv;
    const int64_t next = key + sh->ahead * sh->block;
    block_sweep(&nk, k, sh, next, end, rows + 2 * sh->block);
    block_sweep(&nv, v, sh, next, end, rows + 3 * sh->block);
    fc_prefetch_sweep *next_k = prefetch ? &nk : NULL;
    fc_prefetch_sweep *next_v = prefetch ? &nv : NULL;
    if (sh->group >= sh->block) {
      /* Head by head, K rows then V rows, as the kernel. */
      for (int64_t h = 0; h < sh->heads; h++) {
        const char *near_v = NULL, *near_k = NULL;
        if (o == SWEEP_NEAR) {
          near_v = row_of(v, sh, key, h);
          if (h + 1 < sh->heads)
            near_k = row_of(k, sh, key, h + 1);
          else if (key + sh->block + n <= end)
            near_k = row_of(k, sh, key + sh->block, 0);
        }
        read_rows(s, k, sh, key, n, h, next_k, hint, shared, work, near_v);
        if (sh->serial >= 1) wait_for_sums(s);
        read_rows(s, v, sh, key, n, h, next_v, hint, shared, work, near_k);
        if (sh->serial >= 2) wait_for_sums(s);
      }
      continue;
    }
    /* The block's K then its V, a group of keys of every head at a time. */
    const char *const caches[2] = {k, v};
    fc_prefetch_sweep *const nexts[2] = {next_k, next_v};
    for (int c = 0; c < 2; c++)
      for (int64_t g = 0; g < n; g += sh->group) {
        const int64_t m = n - g < sh->group ? n - g : sh->group;
        for (int64_t h = 0; h < sh->heads; h++)
          read_rows(s, caches[c], sh, key + g, m, h, nexts[c], hint, shared,
                    work, NULL);
      }
  }
  free(rows);
}

/* The work per line as a constant, so the accumulators stay in registers. */
static void read_layer(sink *s, const char *k, const char *v, const shape *sh,
                       int64_t begin, int64_t end, order o) {
  switch (sh->work) {
#define WORK(w)                                                                \
  case w:                                                                      \
    read_layer_with(s, k, v, sh, begin, end, o, w);                            \
    return;
    WORK(0)
    WORK(1)
    WORK(2) WORK(3) WORK(4) WORK(5) WORK(6) WORK(7) WORK(8) WORK(12) WORK(16)
#undef WORK
  }
}

/* The calling thread's CPU time (--clock cpu, one thread). */
static double thread_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* Where the threads' sums go, so that no read is optimised away. */
static volatile float sums[64];

static int compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int64_t parse_int(const char *text, const char *flag) {
  char *end = NULL;
  const long long value = strtoll(text, &end, 10);
  if (!end || *end || value < 0) {
    fprintf(stderr,
            "flashcpu_decode_access: %s wants a number >= 0, got "
            "'%s'\n",
            flag, text);
    exit(2);
  }
  return value;
}

/* This file is built for AVX-512: say so, rather than die of an illegal
 * instruction, on a CPU without it (runs before main, built for the
 * baseline ISA). */
__attribute__((constructor, target("arch=x86-64"))) static void
require_avx512(void) {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
    return;
  fprintf(stderr, "flashcpu_decode_access: this CPU (or its OS) lacks "
                  "AVX-512, which this tool's loads are written in\n");
  exit(2);
}

int main(int argc, char **argv) {
  shape sh = {16384, 8, 128, 0, 16, 16, 0, 0, 0, 1, NULL};
  int64_t threads = 1, reps = 7, footprint_mb = 0;
  bool cpu_clock = false;
  int64_t huge = 0;
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
      printf("usage: flashcpu_decode_access [--kv S] [--heads H] [--dim D] "
             "[--threads T] [--block B] [--group G] [--work N] [--serial "
             "0|1|2] [--reps R] [--footprint-mb M] [--page N] [--clock "
             "wall|cpu] [--huge 0|1] [--ahead N]\n"
             "Reads bf16 K/V caches in split-KV decode's order (see the "
             "source's head comment). Defaults: kv 16384, 8 heads, dim 128,\n"
             "1 thread, blocks of 16 keys read head by head, work 0, 7 reps, "
             "footprint 4x the last-level cache "
             "(at least 1 GiB).\n");
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "flashcpu_decode_access: %s needs a value\n", flag);
      return 2;
    }
    if (!strcmp(flag, "--clock")) {
      cpu_clock = !strcmp(argv[++i], "cpu");
      continue;
    }
    const int64_t value = parse_int(argv[++i], flag);
    if (!strcmp(flag, "--kv"))
      sh.kv = value;
    else if (!strcmp(flag, "--heads"))
      sh.heads = value;
    else if (!strcmp(flag, "--dim"))
      sh.dim = value;
    else if (!strcmp(flag, "--threads"))
      threads = value;
    else if (!strcmp(flag, "--work"))
      sh.work = (int)value;
    else if (!strcmp(flag, "--block"))
      sh.block = value;
    else if (!strcmp(flag, "--group"))
      sh.group = value;
    else if (!strcmp(flag, "--serial"))
      sh.serial = (int)value;
    else if (!strcmp(flag, "--reps"))
      reps = value;
    else if (!strcmp(flag, "--footprint-mb"))
      footprint_mb = value;
    else if (!strcmp(flag, "--page"))
      sh.page = value;
    else if (!strcmp(flag, "--ahead"))
      sh.ahead = value;
    else if (!strcmp(flag, "--huge"))
      huge = value;
    else {
      fprintf(stderr, "flashcpu_decode_access: unknown option %s\n", flag);
      return 2;
    }
  }
  if (sh.kv < 1 || sh.heads < 1 || sh.dim < 64 || sh.dim % 64 || threads < 1 ||
      sh.block < 1 || sh.group < 1 || reps < 1 || reps > MAX_REPS ||
      sh.serial > 2 || (sh.work > 8 && sh.work != 12 && sh.work != 16)) {
    fprintf(stderr,
            "flashcpu_decode_access: want kv, heads, threads >= 1, "
            "dim a multiple of 64, reps 1..%d, work 0..8, 12 or 16, "
            "serial 0..2\n",
            MAX_REPS);
    return 2;
  }
  if (sh.serial > 0 && sh.group < sh.block) {
    fprintf(stderr, "flashcpu_decode_access: --serial reads head by head: it "
                    "wants --group >= --block\n");
    return 2;
  }
  toolkit_quiet_openmp();
  toolkit_ceilings ceil;
  if (toolkit_measure_ceilings((int)threads, &ceil) != 0) {
    fprintf(stderr, "flashcpu_decode_access: cannot measure the ceilings\n");
    return 1;
  }
  const int64_t pages = sh.page ? (sh.kv + sh.page - 1) / sh.page : 0;
  const int64_t layer_bytes =
      (sh.page ? pages * sh.page : sh.kv) * sh.heads * sh.dim * 2;
  int64_t *slot_of_page = malloc((size_t)(pages ? pages : 1) * sizeof(int64_t));
  if (!slot_of_page) return 1;
  uint64_t random = 0x9e3779b97f4a7c15ull;
  for (int64_t p = 0; p < pages; p++) slot_of_page[p] = p;
  for (int64_t p = pages - 1; p > 0; p--) { /* Fisher-Yates */
    random = random * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t q = (int64_t)((random >> 33) % (uint64_t)(p + 1));
    const int64_t t = slot_of_page[p];
    slot_of_page[p] = slot_of_page[q];
    slot_of_page[q] = t;
  }
  sh.slot_of_page = slot_of_page;
  const double footprint = footprint_mb ? (double)footprint_mb * 1048576.0
                                        : (ceil.read_buffer_bytes > 1073741824.0
                                               ? ceil.read_buffer_bytes
                                               : 1073741824.0);
  sh.layers = (int64_t)(footprint / (2.0 * (double)layer_bytes));
  if (sh.layers < 1) sh.layers = 1;
  char **k = calloc((size_t)sh.layers, sizeof *k);
  char **v = calloc((size_t)sh.layers, sizeof *v);
  if (!k || !v) return 1;
  for (int64_t l = 0; l < sh.layers; l++) {
    const int64_t align = huge ? 2 << 20 : 4096;
    const size_t size = (size_t)((layer_bytes + align - 1) & ~(align - 1));
    k[l] = aligned_alloc((size_t)align, size);
    v[l] = aligned_alloc((size_t)align, size);
    if (!k[l] || !v[l]) {
      fprintf(stderr, "flashcpu_decode_access: out of memory\n");
      return 1;
    }
    if (huge) { /* transparent huge pages, where the system gives them */
      madvise(k[l], size, MADV_HUGEPAGE);
      madvise(v[l], size, MADV_HUGEPAGE);
    }
    memset(k[l], 0x3c, (size_t)layer_bytes);
    memset(v[l], 0x3c, (size_t)layer_bytes);
  }
  printf("decode access: kv %lld, heads %lld, dim %lld, bf16, %lld layers "
         "(%.0f MiB), threads %lld, blocks of %lld keys, groups of %lld, work "
         "%d FMAs per line, serial %d, pages of %lld keys (0: contiguous), "
         "%s time\n",
         (long long)sh.kv, (long long)sh.heads, (long long)sh.dim,
         (long long)sh.layers,
         2.0 * (double)(layer_bytes * sh.layers) / 1048576.0,
         (long long)threads, (long long)sh.block, (long long)sh.group, sh.work,
         sh.serial, (long long)sh.page, cpu_clock ? "thread CPU" : "wall");
  toolkit_print_ceilings(stdout, &ceil);
  /* Each thread a contiguous range of 16-key blocks of every layer. */
  const int64_t blocks = (sh.kv + sh.block - 1) / sh.block;
  const double bytes = 2.0 * (double)layer_bytes * (double)sh.layers;
  for (int o = 0; o < ORDERS; o++) {
    double rate[MAX_REPS];
    for (int64_t r = 0; r < reps + 1; r++) { /* pass 0 warms up */
      const double t0 = cpu_clock ? thread_seconds() : toolkit_now_seconds();
#pragma omp parallel num_threads((int)threads)
      {
        const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t begin = blocks * t / n * sh.block;
        int64_t end = blocks * (t + 1) / n * sh.block;
        if (end > sh.kv) end = sh.kv;
        sink s;
        for (int i = 0; i < 16; i++) s.acc[i] = _mm512_setzero_ps();
        for (int64_t l = 0; l < sh.layers; l++)
          read_layer(&s, k[l], v[l], &sh, begin, end, (order)o);
        __m512 total = s.acc[0];
        for (int i = 1; i < 16; i++) total = _mm512_add_ps(total, s.acc[i]);
        sums[omp_get_thread_num() % 64] = _mm512_reduce_add_ps(total);
      }
      const double t1 = cpu_clock ? thread_seconds() : toolkit_now_seconds();
      if (r > 0) rate[r - 1] = bytes / (t1 - t0) / 1e9;
    }
    qsort(rate, (size_t)reps, sizeof rate[0], compare_doubles);
    printf("  %-9s %6.1f GB/s median (%5.1f%% of read), min %.1f, max %.1f\n",
           order_names[o], rate[reps / 2],
           100.0 * rate[reps / 2] / ceil.read_gbps, rate[0], rate[reps - 1]);
  }
  for (int64_t l = 0; l < sh.layers; l++) {
    free(k[l]);
    free(v[l]);
  }
  free(k);
  free(v);
  free(slot_of_page);
  return 0;
}
