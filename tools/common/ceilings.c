/* Ceiling measurements. Every pass is timed between barriers of one
 * parallel region, so the time covers the slowest thread and no fork/join;
 * the best pass is kept because the machines are shared and noise only ever
 * makes a pass slower. */
#include "common/ceilings.h"

#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ceiling_kernels.h"
#include "common/cpu_info.h"
#include "common/timer.h"
#include "flashcpu/flashcpu.h"

enum {
  READ_PASSES = 6,
  FMA_PASSES = 3,
  FLOATS_PER_STEP = 64 /* one kernel iteration; 4 cache lines */
};
static const double FMA_PASS_SECONDS = 0.03;
static const uint64_t MIN_READ_BUFFER = 64ull << 20;

/* The library's own detector: it checks the OS (XCR0) as well as the CPU,
 * so the ceilings use the same vector registers attention may use. */
static toolkit_ceiling_kernels select_kernels(void) {
#if defined(TOOLKIT_HAVE_X86_ISA_KERNELS)
  if (flashcpu_isa_supported(FLASHCPU_ISA_AVX512))
    return toolkit_ceiling_kernels_avx512();
  if (flashcpu_isa_supported(FLASHCPU_ISA_AVX2))
    return toolkit_ceiling_kernels_avx2();
#endif
  return toolkit_ceiling_kernels_portable();
}

/* Four times every last-level cache of the machine together, so no pass
 * can be served from cache; capped at an eighth of RAM. */
static uint64_t read_buffer_bytes(void) {
  toolkit_cpu_info info;
  toolkit_cpu_info_query(&info);
  uint64_t bytes = 4 * info.llc_total_bytes;
  if (bytes < MIN_READ_BUFFER) bytes = MIN_READ_BUFFER;
  if (info.memory_bytes && bytes > info.memory_bytes / 8)
    bytes = info.memory_bytes / 8;
  return bytes & ~(uint64_t)(FLOATS_PER_STEP * sizeof(float) - 1);
}

/* Thread t's share [*begin, *end) of count floats, in whole steps. */
static void thread_share(size_t count, int threads, int t, size_t *begin,
                         size_t *end) {
  size_t steps = count / FLOATS_PER_STEP;
  *begin = steps * (size_t)t / (size_t)threads * FLOATS_PER_STEP;
  *end = steps * (size_t)(t + 1) / (size_t)threads * FLOATS_PER_STEP;
}

static double measure_read(const toolkit_ceiling_kernels *kernels, int threads,
                           uint64_t bytes) {
  size_t count = (size_t)(bytes / sizeof(float));
  float *buffer = aligned_alloc(4096, (size_t)bytes);
  if (!buffer) return 0.0;
  double best = 1e30, start = 0.0;
  float sink = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    size_t begin, end;
    thread_share(count, omp_get_num_threads(), omp_get_thread_num(), &begin,
                 &end);
    /* First touch by the thread that reads it: pages land on its node. */
    for (size_t i = begin; i < end; i++) buffer[i] = 1.0f / (float)(i % 7 + 1);
    for (int pass = 0; pass < READ_PASSES; pass++) {
#pragma omp barrier
#pragma omp single
      start = toolkit_now_seconds();
      sink += kernels->read_sum(buffer + begin, end - begin);
#pragma omp barrier
#pragma omp single
      {
        double elapsed = toolkit_now_seconds() - start;
        if (elapsed < best) best = elapsed;
      }
    }
  }
  free(buffer);
  /* A result the compiler cannot see through keeps the loads alive. */
  volatile float keep = sink;
  (void)keep;
  return (double)bytes / best * 1e-9;
}

/* A compute loop to rate: run(context, iterations) does iterations of a
 * fixed number of flops and returns a value that depends on all of them. */
typedef float (*rate_loop)(const void *context, int64_t iterations);

/* Flops per second of loop at `threads` threads: iterations calibrated to
 * about FMA_PASS_SECONDS on one thread, then the best of FMA_PASSES passes
 * timed between barriers. */
static double measure_rate(rate_loop loop, const void *context,
                           double flops_per_iteration, int threads) {
  int64_t iterations = 1 << 10;
  for (;;) {
    const double start = toolkit_now_seconds();
    volatile float keep = loop(context, iterations);
    (void)keep;
    const double elapsed = toolkit_now_seconds() - start;
    if (elapsed > FMA_PASS_SECONDS / 8 || iterations > (INT64_C(1) << 40)) {
      iterations =
          (int64_t)((double)iterations * FMA_PASS_SECONDS / elapsed) + 1;
      break;
    }
    iterations *= 4;
  }
  double best = 1e30, start = 0.0;
  float sink = 0.0f;
  int team = 1;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
#pragma omp single
    team = omp_get_num_threads();
    for (int pass = 0; pass < FMA_PASSES; pass++) {
#pragma omp barrier
#pragma omp single
      start = toolkit_now_seconds();
      sink += loop(context, iterations);
#pragma omp barrier
#pragma omp single
      {
        double elapsed = toolkit_now_seconds() - start;
        if (elapsed < best) best = elapsed;
      }
    }
  }
  volatile float keep = sink;
  (void)keep;
  return flops_per_iteration * (double)iterations * team / best * 1e-9;
}

/* The FMA loop with runtime operands, so the compiler cannot fold it. */
typedef struct fma_context {
  const toolkit_ceiling_kernels *kernels;
  float multiplier, addend;
} fma_context;

static float fma_rate_loop(const void *opaque, int64_t iterations) {
  const fma_context *c = opaque;
  return c->kernels->fma_loop(iterations, c->multiplier, c->addend);
}

static double measure_fma(const toolkit_ceiling_kernels *kernels, int threads) {
  volatile float multiplier_source = 0.999999f, addend_source = 1e-6f;
  const fma_context context = {kernels, multiplier_source, addend_source};
  return measure_rate(fma_rate_loop, &context,
                      2.0 * kernels->fma_lanes * TOOLKIT_FMA_CHAINS, threads);
}

#if defined(TOOLKIT_HAVE_BF16_UNIT_KERNELS)
/* Whether a kernel of the library that needs the unit runs here: the
 * library's check includes the OS (and, for AMX, Linux's grant of the tile
 * data to this process, which it asks for). */
static bool library_runs(const char *name_part) {
  flashcpu_kernel_info info;
  flashcpu_kernel_info_init(&info);
  for (int i = 0; flashcpu_kernel_info_get(i, &info); i++)
    if (info.runnable && strstr(info.name, name_part)) return true;
  return false;
}

static float dot_rate_loop(const void *context, int64_t iterations) {
  (void)context;
  return toolkit_bf16_dot_loop(iterations);
}

static float amx_rate_loop(const void *context, int64_t iterations) {
  (void)context;
  return toolkit_amx_loop(iterations);
}
#endif

int toolkit_measure_ceilings(int threads, toolkit_ceilings *ceilings) {
  memset(ceilings, 0, sizeof *ceilings);
  if (threads < 1) threads = 1;
  const double start = toolkit_now_seconds();
  const toolkit_ceiling_kernels kernels = select_kernels();
  const uint64_t bytes = read_buffer_bytes();
  ceilings->threads = threads;
  ceilings->read_isa = kernels.isa;
  ceilings->fma_isa = kernels.isa;
  ceilings->read_buffer_bytes = (double)bytes;
  ceilings->read_gbps = measure_read(&kernels, threads, bytes);
  ceilings->fma_gflops = measure_fma(&kernels, threads);
#if defined(TOOLKIT_HAVE_BF16_UNIT_KERNELS)
  /* 16 VDPBF16PS of 32 multiply-adds; 4 TDPBF16PS of 16 x 16 x 32. */
  if (library_runs("__avx512bf16"))
    ceilings->bf16_dot_gflops =
        measure_rate(dot_rate_loop, NULL, 16.0 * 32 * 2, threads);
  if (library_runs("__amxbf16"))
    ceilings->amx_gflops =
        measure_rate(amx_rate_loop, NULL, 4.0 * 16 * 16 * 32 * 2, threads);
#endif
  ceilings->seconds = toolkit_now_seconds() - start;
  return ceilings->read_gbps > 0.0 ? 0 : -1;
}

void toolkit_print_ceilings(FILE *stream, const toolkit_ceilings *ceilings) {
  char buffer_size[32];
  toolkit_format_bytes((uint64_t)ceilings->read_buffer_bytes, buffer_size,
                       sizeof buffer_size);
  fprintf(stream,
          "threads %d: read %.1f GB/s (%s loads, %s buffer), fma %.1f "
          "GFLOP/s (%s fp32), measured in %.2f s\n",
          ceilings->threads, ceilings->read_gbps, ceilings->read_isa,
          buffer_size, ceilings->fma_gflops, ceilings->fma_isa,
          ceilings->seconds);
  if (ceilings->bf16_dot_gflops > 0.0 || ceilings->amx_gflops > 0.0)
    fprintf(stream,
            "           bf16: %.1f GFLOP/s (VDPBF16PS), %.1f GFLOP/s (AMX "
            "tiles)\n",
            ceilings->bf16_dot_gflops, ceilings->amx_gflops);
}

toolkit_unit toolkit_unit_of_kernels(const char *kernels) {
  if (!kernels) return TOOLKIT_UNIT_FMA;
  if (strstr(kernels, "prefill") && strstr(kernels, "__amxbf16"))
    return TOOLKIT_UNIT_AMX;
  if (strstr(kernels, "prefill_bf16dot")) return TOOLKIT_UNIT_BF16_DOT;
  return TOOLKIT_UNIT_FMA;
}

double toolkit_unit_gflops(const toolkit_ceilings *ceilings,
                           toolkit_unit unit) {
  if (unit == TOOLKIT_UNIT_AMX && ceilings->amx_gflops > 0.0)
    return ceilings->amx_gflops;
  if (unit == TOOLKIT_UNIT_BF16_DOT && ceilings->bf16_dot_gflops > 0.0)
    return ceilings->bf16_dot_gflops;
  return ceilings->fma_gflops;
}

const char *toolkit_unit_name(toolkit_unit unit) {
  switch (unit) {
  case TOOLKIT_UNIT_AMX:
    return "AMX tile peak";
  case TOOLKIT_UNIT_BF16_DOT:
    return "VDPBF16PS peak";
  default:
    return "fp32 FMA peak";
  }
}
