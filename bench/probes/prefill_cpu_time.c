/* flashcpu_prefill_cpu_time: one prefill call on one thread, timed in the
 * process's CPU time as well as wall time, against the fp32 FMA rate and
 * the AMX register-only tile rate measured the same way. On a machine
 * whose cores other processes share, the wall time of a call swings with
 * their load while its CPU time stays what the kernel costs; the shares
 * printed are of CPU time.
 *   --dtype f32|bf16  q, k, v and out (default f32)
 *   --rows L --kv S   query rows and keys (default 4096 each)
 *   --heads HQ,HKV    (default 32,8)   --dim D (default 128)
 *   --causal | --no-causal (default causal)   --reps N (default 5)
 *   --settings TEXT   the context's settings (e.g. "kernel = ...")
 *   --lib PATH        (repeatable) a build of libflashcpu to time instead
 *                     of the linked one; several are called in turns, one
 *                     call each per rep, so that they share the machine's
 *                     moods, and each is compared with the first
 * Prints per library the median (min, max) CPU and wall time of the reps,
 * GFLOP/s on CPU time, that as a share of each peak, the median of the
 * per-rep ratios of CPU time to the first library's, and a hash of the
 * first call's output bytes (builds meant to agree print the same). */
#define _GNU_SOURCE /* syscall */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/ceiling_kernels.h"
#include "common/timer.h"
#include "flashcpu/flashcpu.h"

enum { REPS_MAX = 99, LIBS_MAX = 8 };

/* The library calls the probe makes, from the linked library or a --lib. */
typedef struct api {
  void (*options_init)(flashcpu_context_options *);
  flashcpu_status (*create)(const flashcpu_context_options *,
                            flashcpu_context **);
  void (*destroy)(flashcpu_context *);
  void (*params_init)(flashcpu_attention_params *);
  flashcpu_status (*attention)(flashcpu_context *, const flashcpu_tensor *,
                               const flashcpu_tensor *, const flashcpu_tensor *,
                               const flashcpu_tensor *, float *,
                               const flashcpu_attention_params *);
  const char *(*last_kernels)(const flashcpu_context *);
  const char *(*last_error)(const flashcpu_context *);
} api;

static api linked_api(void) {
  const api a = {flashcpu_context_options_init,
                 flashcpu_context_create,
                 flashcpu_context_destroy,
                 flashcpu_attention_params_init,
                 flashcpu_attention,
                 flashcpu_context_last_kernels,
                 flashcpu_last_error};
  return a;
}

/* The calls from the library at path (its own copy: RTLD_DEEPBIND keeps
 * its symbols apart from the linked library's); false if one is missing. */
static bool load_api(const char *path, api *a) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return false;
  }
#define LOAD(field, name)                                                      \
  if (!(*(void **)&a->field = dlsym(lib, name))) return false
  LOAD(options_init, "flashcpu_context_options_init");
  LOAD(create, "flashcpu_context_create");
  LOAD(destroy, "flashcpu_context_destroy");
  LOAD(params_init, "flashcpu_attention_params_init");
  LOAD(attention, "flashcpu_attention");
  LOAD(last_kernels, "flashcpu_context_last_kernels");
  LOAD(last_error, "flashcpu_last_error");
#undef LOAD
  return true;
}

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* FNV-1a of n bytes: builds that should agree to the byte print the same. */
static uint64_t bytes_hash(const void *data, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) {
    h ^= ((const unsigned char *)data)[i];
    h *= 1099511628211ull;
  }
  return h;
}

static uint16_t to_bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

/* A [1, n, heads, dim] tensor of values in [-1, 1). */
static flashcpu_tensor make(flashcpu_dtype dtype, int64_t n, int64_t heads,
                            int64_t dim, unsigned *seed) {
  const size_t count = (size_t)(n * heads * dim);
  const size_t size = dtype == FLASHCPU_DTYPE_F32 ? 4 : 2;
  flashcpu_tensor t = {aligned_alloc(64, (count * size + 63) / 64 * 64),
                       dtype,
                       {1, n, heads, dim},
                       {n * heads * dim, heads * dim, dim, 1}};
  for (size_t i = 0; i < count; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    const float x = (float)(*seed >> 8) / 8388608.0f - 1.0f;
    if (dtype == FLASHCPU_DTYPE_F32)
      ((float *)t.data)[i] = x;
    else
      ((uint16_t *)t.data)[i] = to_bf16(x);
  }
  return t;
}

/* GFLOP/s of fn over `iterations`, in CPU time, best of five. */
static double peak(float (*fn)(int64_t), int64_t iterations, double flops) {
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < 5; r++) {
    const double t0 = cpu_seconds();
    sink += fn(iterations);
    const double rate = flops * (double)iterations / (cpu_seconds() - t0);
    best = rate > best ? rate : best;
  }
  (void)sink;
  return best * 1e-9;
}

static toolkit_ceiling_kernels fma_kernels;
static float fma_loop(int64_t iterations) {
  return fma_kernels.fma_loop(iterations, 0.999999f, 1e-6f);
}

int main(int argc, char **argv) {
  flashcpu_dtype dtype = FLASHCPU_DTYPE_F32;
  int64_t rows = 4096, kv = 4096, hq = 32, hkv = 8, dim = 128;
  int causal = 1, reps = 5;
  const char *settings = "";
  const char *lib_paths[LIBS_MAX];
  int libs = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--causal"))
      causal = 1;
    else if (!strcmp(arg, "--no-causal"))
      causal = 0;
    else if (value && !strcmp(arg, "--dtype")) {
      dtype = !strcmp(value, "bf16") ? FLASHCPU_DTYPE_BF16 : FLASHCPU_DTYPE_F32;
      i++;
    } else if (value && !strcmp(arg, "--rows"))
      rows = atoll(argv[++i]);
    else if (value && !strcmp(arg, "--kv"))
      kv = atoll(argv[++i]);
    else if (value && !strcmp(arg, "--dim"))
      dim = atoll(argv[++i]);
    else if (value && !strcmp(arg, "--reps"))
      reps = atoi(argv[++i]);
    else if (value && !strcmp(arg, "--settings"))
      settings = argv[++i];
    else if (value && !strcmp(arg, "--lib") && libs < LIBS_MAX)
      lib_paths[libs++] = argv[++i];
    else if (value && !strcmp(arg, "--heads") &&
             sscanf(value, "%ld,%ld", &hq, &hkv) == 2)
      i++;
    else {
      fprintf(stderr, "usage: flashcpu_prefill_cpu_time [--dtype f32|bf16] "
                      "[--rows L] [--kv S] [--heads HQ,HKV] [--dim D] "
                      "[--causal|--no-causal] [--reps N] [--settings T] "
                      "[--lib PATH]...\n");
      return 2;
    }
  }
  if (reps < 1 || reps > REPS_MAX) reps = 5;
  if (rows < 1 || kv < rows || hq < 1 || hkv < 1 || hq % hkv || dim < 1) {
    fprintf(stderr, "flashcpu_prefill_cpu_time: bad shape\n");
    return 2;
  }
  api apis[LIBS_MAX];
  if (libs == 0) {
    apis[0] = linked_api();
    lib_paths[0] = "linked";
    libs = 1;
  }
  for (int i = 0; i < libs; i++)
    if (strcmp(lib_paths[i], "linked") && !load_api(lib_paths[i], &apis[i])) {
      fprintf(stderr, "flashcpu_prefill_cpu_time: cannot use %s\n",
              lib_paths[i]);
      return 1;
    }
  unsigned seed = 12345;
  const flashcpu_tensor q = make(dtype, rows, hq, dim, &seed),
                        k = make(dtype, kv, hkv, dim, &seed),
                        v = make(dtype, kv, hkv, dim, &seed),
                        out = make(dtype, rows, hq, dim, &seed);
  const size_t out_bytes =
      (size_t)(rows * hq * dim) * (dtype == FLASHCPU_DTYPE_F32 ? 4 : 2);
  flashcpu_context *ctx[LIBS_MAX];
  flashcpu_attention_params params[LIBS_MAX];
  uint64_t out_hash[LIBS_MAX];
  for (int i = 0; i < libs; i++) {
    flashcpu_context_options options;
    apis[i].options_init(&options);
    options.num_threads = 1;
    options.settings = settings;
    if (apis[i].create(&options, &ctx[i]) != FLASHCPU_OK) {
      fprintf(stderr, "%s\n", apis[i].last_error(NULL));
      return 1;
    }
    apis[i].params_init(&params[i]);
    params[i].flags = causal ? FLASHCPU_FLAG_CAUSAL : 0u;
    if (apis[i].attention(ctx[i], &q, &k, &v, &out, NULL, &params[i]) !=
        FLASHCPU_OK) {
      fprintf(stderr, "%s\n", apis[i].last_error(ctx[i]));
      return 1;
    }
    out_hash[i] = bytes_hash(out.data, out_bytes);
  }
  /* (row, key) pairs seen: row i sees keys up to kv - rows + i */
  double pairs = 0.0;
  for (int64_t i = 0; i < rows; i++)
    pairs += causal ? (double)(kv - rows + i + 1) : (double)kv;
  const double flops = 4.0 * pairs * (double)(hq * dim);
  double cpu[LIBS_MAX][REPS_MAX], wall[LIBS_MAX][REPS_MAX],
      ratio[LIBS_MAX][REPS_MAX];
  for (int r = 0; r < reps; r++)
    for (int i = 0; i < libs; i++) {
      const double w0 = toolkit_now_seconds(), c0 = cpu_seconds();
      apis[i].attention(ctx[i], &q, &k, &v, &out, NULL, &params[i]);
      cpu[i][r] = cpu_seconds() - c0;
      wall[i][r] = toolkit_now_seconds() - w0;
      ratio[i][r] = cpu[i][r] / cpu[0][r];
    }
  fma_kernels = toolkit_ceiling_kernels_avx512();
  const double fma = peak(fma_loop, 20000000,
                          2.0 * fma_kernels.fma_lanes * TOOLKIT_FMA_CHAINS);
  double amx = 0.0;
#if defined(TOOLKIT_HAVE_BF16_UNIT_KERNELS)
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0)
    amx = peak(toolkit_amx_loop, 2000000, 4.0 * 16 * 16 * 32 * 2);
#endif
  for (int i = 0; i < libs; i++) {
    qsort(cpu[i], (size_t)reps, sizeof cpu[i][0], compare);
    qsort(wall[i], (size_t)reps, sizeof wall[i][0], compare);
    qsort(ratio[i], (size_t)reps, sizeof ratio[i][0], compare);
    const double rate = flops / cpu[i][reps / 2] * 1e-9;
    printf("%s L %ld S %ld heads %ld/%ld D %ld %s: cpu %.2f ms (%.2f, %.2f) "
           "wall %.2f ms (%.2f, %.2f); %.1f GFLOP/s, %.1f%% of fma %.1f, "
           "%.1f%% of amx %.0f; x first %.3f; out %016llx; %s; %s\n",
           dtype == FLASHCPU_DTYPE_F32 ? "f32" : "bf16", rows, kv, hq, hkv, dim,
           causal ? "causal" : "full", cpu[i][reps / 2] * 1e3, cpu[i][0] * 1e3,
           cpu[i][reps - 1] * 1e3, wall[i][reps / 2] * 1e3, wall[i][0] * 1e3,
           wall[i][reps - 1] * 1e3, rate, 100.0 * rate / fma, fma,
           amx > 0.0 ? 100.0 * rate / amx : 0.0, amx, ratio[i][reps / 2],
           (unsigned long long)out_hash[i], apis[i].last_kernels(ctx[i]),
           lib_paths[i]);
    apis[i].destroy(ctx[i]);
  }
  return 0;
}
