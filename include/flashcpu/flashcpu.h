/*
 * flashcpu: exact attention (FlashAttention) on multicore CPUs.
 *
 *   O = softmax(Q K^T * scale  [softcap]  [+ ALiBi + additive mask]  [masks]
 *               [sink]) V
 *
 * flashcpu_attention() computes attention for a batch of sequences with any
 * mix of the options below; flashcpu_attention_paged() does the same for an
 * engine's ragged batch over a paged KV cache. The L x S score matrix is
 * never formed: Q and K/V are tiled under an online softmax, accumulated in
 * float32 whatever the storage dtype. docs/api.md is the reference by
 * topic; this header is the contract.
 *
 * Conventions (the semantics every kernel and ISA keeps):
 *
 *  - Tensors are views (flashcpu_tensor): data, dtype, dims in the order
 *    [batch, seq, heads, head_dim] and a stride per dim counted in elements.
 *    head_dim must be contiguous (stride 1); the other strides are free and
 *    non-negative (BSHD, BHSD, caches with spare rows).
 *      q   [B, L, Hq,  D]     k [B, S, Hkv, D]     v [B, S, Hkv, Dv]
 *      out [B, L, Hq,  Dv]    lse (optional) float32 [B, Hq, L], contiguous
 *  - dtypes: f32, f16 and bf16 for each of q, k, v, out independently;
 *    k and v may also be quantized (see "quantized K/V").
 *  - scale: 0 means 1/sqrt(D).
 *  - GQA: Hq must be a multiple of Hkv; query head h reads kv head
 *    h / (Hq / Hkv). Hkv == 1 is MQA, Hkv == Hq is MHA.
 *  - kv lengths: S is the capacity of the K/V views. With kv_lengths given,
 *    batch b uses only its first kv_lengths[b] rows (0 <= len <= S), and
 *    every mask below is aligned to that length. Without it every batch uses
 *    S. Below, S_b is the length batch b uses.
 *  - Causal is aligned bottom-right: query row i sees key j when
 *    j <= i + (S_b - L) (plus query_offsets[b], where given). Rows with
 *    i + (S_b - L) < 0 see nothing.
 *  - Sliding window (left, right), inclusive, -1 meaning unbounded: query row
 *    i at position p = i + (S_b - L) sees key j when
 *    p - left <= j <= p + right. Window (0, 0) sees only the key at p.
 *  - Softcap (cap > 0): the scaled score x becomes cap * tanh(x / cap)
 *    before the additive mask and before any mask hides a key.
 *  - Tree mask (speculative decoding): packed bits over the newest
 *    num_keys keys of each batch. Key j >= S_b - num_keys is visible to query
 *    row i only if bit (j - (S_b - num_keys)) of row i is set; older keys are
 *    not affected by the tree mask.
 *  - Additive mask: float32 values added to the (softcapped) score of every
 *    (batch, q head, query row, key) through four strides; a stride of 0
 *    broadcasts. -INFINITY hides a key.
 *  - Every mask combines with the others: a key is visible when every given
 *    mask lets it through.
 *  - A row that sees no key (fully masked, or S_b == 0) gets output 0 and
 *    log-sum-exp -INFINITY, never NaN.
 *  - NaN in the data a row reads (its q row, visible k and v rows, its mask
 *    values) propagates to that row's output and log-sum-exp.
 *  - lse is the natural-log log-sum-exp of the row's final scores (after
 *    scale, softcap and the additive mask).
 *  - Finite scores stay finite: kernels work in the log2 domain, so a final
 *    score beyond +-FLT_MAX * ln 2 (about +-2.3587e38) saturates there
 *    instead of overflowing. A row whose keys all get -FLT_MAX from the
 *    additive mask gets the uniform softmax that f32 defines, not an empty
 *    row; a key with a +3e38 bias gets all the weight, not NaN. Scores past
 *    that bound tie, and the row's lse saturates at it. An infinite score
 *    (q or k holding inf, or a q.k that overflows) saturates the same way;
 *    only a -INFINITY mask hides a key, and NaN stays NaN.
 *  - Precision: inputs are widened to f32 (bf16 dot products and AMX
 *    tiles multiply bf16 pairs exactly) and sums are f32. Kernels that
 *    round the softmax weights P to bf16 say so
 *    (flashcpu_kernel_info.weights_dtype); "quantized K/V" says what the
 *    integer decode kernels round.
 *  - Determinism: for the same inputs, shapes, dtypes, build, ISA and
 *    settings the output bytes do not depend on the thread count or the
 *    schedule.
 *
 * Errors: every function that can fail returns a flashcpu_status (but
 * flashcpu_kernel_info_get, which returns 0). On any error nothing is
 * written to the outputs, and flashcpu_last_error gives a readable message.
 * Nothing in the library aborts.
 *
 * Ownership: the library keeps no pointer the caller passes beyond the call
 * (option strings are read by flashcpu_context_create and not kept; a plan
 * copies its batch). Contexts and plans are the library's, freed by their
 * destroy functions; every other buffer is the caller's.
 *
 * ABI: structs that may grow carry struct_size, set by their _init
 * function; the library accepts the layouts of released versions (each
 * struct says which). The view structs (flashcpu_tensor, the masks,
 * flashcpu_kv_scales, flashcpu_host_openmp) keep their layout for good.
 * Enum values are fixed.
 *
 * Environment, read once per context creation: FLASHCPU_ISA (caps the ISA:
 * scalar, avx2, avx512 or neon), FLASHCPU_VERBOSE (1: log each context's
 * plan and settings, and each call's kernel, to stderr), FLASHCPU_TUNE_FILE
 * (a tune file, see flashcpu_context_options) and OMP_NUM_THREADS (the
 * default thread count). Every other choice is a context option.
 *
 * Threads: a context is not safe to use from two threads at once; use one
 * context per calling thread. Different contexts are independent. A
 * context's worker threads (OpenMP threads) do not survive fork(): a child
 * process creates its own contexts.
 */
#ifndef FLASHCPU_FLASHCPU_H
#define FLASHCPU_FLASHCPU_H

#include <stddef.h>
#include <stdint.h>

#define FLASHCPU_VERSION_MAJOR 0
#define FLASHCPU_VERSION_MINOR 3
#define FLASHCPU_VERSION_PATCH 0
#define FLASHCPU_VERSION_STRING "0.3.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, comparable with flashcpu_version(). */
#define FLASHCPU_VERSION                                                       \
  (FLASHCPU_VERSION_MAJOR * 10000 + FLASHCPU_VERSION_MINOR * 100 +             \
   FLASHCPU_VERSION_PATCH)

/* Symbols are hidden by default; FLASHCPU_API marks the public ones.
 * Define FLASHCPU_STATIC when linking the static library on Windows. */
#if defined(_WIN32) && !defined(FLASHCPU_STATIC)
#if defined(FLASHCPU_BUILDING)
#define FLASHCPU_API __declspec(dllexport)
#else
#define FLASHCPU_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define FLASHCPU_API __attribute__((visibility("default")))
#else
#define FLASHCPU_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

/* The library's version as MAJOR * 10000 + MINOR * 100 + PATCH. */
FLASHCPU_API int flashcpu_version(void);
/* The library's version as "MAJOR.MINOR.PATCH". */
FLASHCPU_API const char *flashcpu_version_string(void);

/* ----------------------------------------------------------------- status */

typedef enum flashcpu_status {
  FLASHCPU_OK = 0,
  FLASHCPU_ERROR_NULL_POINTER = 1,      /* a required pointer is NULL */
  FLASHCPU_ERROR_INVALID_ARGUMENT = 2,  /* a value out of its allowed range */
  FLASHCPU_ERROR_SHAPE_MISMATCH = 3,    /* dims of tensors disagree */
  FLASHCPU_ERROR_BAD_LAYOUT = 4,        /* strides: head_dim not contiguous,
                                           negative, or out aliasing */
  FLASHCPU_ERROR_OVERLAP = 5,           /* out or lse overlaps an input */
  FLASHCPU_ERROR_UNSUPPORTED_DTYPE = 6, /* dtype value not in flashcpu_dtype */
  FLASHCPU_ERROR_SIZE_OVERFLOW = 7,     /* an extent does not fit int64 */
  FLASHCPU_ERROR_OUT_OF_MEMORY = 8,     /* an allocation failed */
  FLASHCPU_ERROR_INTERNAL = 9           /* a bug in flashcpu: please report */
} flashcpu_status;

/* The enumerator's name without the prefix, e.g. "OK", "NULL_POINTER";
 * "UNKNOWN_STATUS" for a value outside the enum. Never NULL. */
FLASHCPU_API const char *flashcpu_status_name(flashcpu_status status);

/* ----------------------------------------------------------------- dtypes */

typedef enum flashcpu_dtype {
  FLASHCPU_DTYPE_F32 = 0,
  FLASHCPU_DTYPE_F16 = 1,  /* IEEE binary16 */
  FLASHCPU_DTYPE_BF16 = 2, /* bfloat16 */
  /* Quantized storage, for K and V only (see "quantized K/V" below). */
  FLASHCPU_DTYPE_I8 = 3,      /* int8 code c: value = scale * c */
  FLASHCPU_DTYPE_U8 = 4,      /* uint8 code c: value = scale * (c - zero) */
  FLASHCPU_DTYPE_F8_E4M3 = 5, /* OCP fp8 E4M3 (e4m3fn: largest 448, no
                                 inf, NaN 0x7f / 0xff): value = scale * c */
  FLASHCPU_DTYPE_F8_E5M2 = 6, /* OCP fp8 E5M2 (an f16's upper byte: inf
                                 and NaN as in f16): value = scale * c */
  FLASHCPU_DTYPE_Q8_0 = 7     /* llama.cpp's block_q8_0: per 32 values an
                                 f16 scale d, then 32 int8 codes c (34
                                 bytes); value = d * c */
} flashcpu_dtype;

/* ---------------------------------------------------------------- context */

typedef struct flashcpu_context flashcpu_context;

/* Which cores form a team: the threads that cooperate on one tile and share
 * its scratch (the CPU's threadgroup). */
typedef enum flashcpu_team_level {
  /* FLASHCPU_TEAM_L2 when some L2 cache is shared by several of the cores
   * the context uses, else FLASHCPU_TEAM_CORE. */
  FLASHCPU_TEAM_AUTO = 0,
  FLASHCPU_TEAM_CORE = 1, /* one team per core */
  FLASHCPU_TEAM_L2 = 2,   /* cores sharing an L2 cache */
  FLASHCPU_TEAM_L3 = 3,   /* cores sharing an L3 cache */
  FLASHCPU_TEAM_NUMA = 4  /* cores of a NUMA node */
} flashcpu_team_level;

/* Instruction sets a context may use, as a cap. */
typedef enum flashcpu_isa {
  FLASHCPU_ISA_AUTO = 0,   /* the best the CPU and the OS support */
  FLASHCPU_ISA_SCALAR = 1, /* portable C only */
  FLASHCPU_ISA_AVX2 = 2,   /* x86-64 AVX2 + FMA + F16C */
  FLASHCPU_ISA_AVX512 = 3, /* x86-64 AVX-512 F/BW/VL/DQ (+BF16 where present) */
  FLASHCPU_ISA_NEON = 4    /* aarch64 Advanced SIMD */
} flashcpu_isa;

/* "auto", "scalar", "avx2", "avx512", "neon"; "unknown" otherwise. */
FLASHCPU_API const char *flashcpu_isa_name(flashcpu_isa isa);
/* 1 when this CPU and its OS can run the ISA (AUTO and SCALAR: always),
 * else 0. The OS check (XCR0 on x86) is included. */
FLASHCPU_API int flashcpu_isa_supported(flashcpu_isa isa);
/* Writes the CPU features flashcpu detected, space-separated (e.g.
 * "avx2 fma f16c avx512f ..."), truncated to size bytes including the NUL.
 * Returns the length the full text needs. */
FLASHCPU_API size_t flashcpu_cpu_features(char *buffer, size_t size);

/* The host process's OpenMP runtime, for flashcpu_context_options'
 * host_openmp: three entry points of one runtime (libgomp, LLVM's libomp and
 * Intel's libiomp5 all export them under these names). */
typedef struct flashcpu_host_openmp {
  /* GOMP_parallel: runs fn(data) on num_threads threads of the host's
   * pool, the calling thread among them, and returns when every one has
   * returned. flashcpu passes flags 0. */
  void (*parallel)(void (*fn)(void *), void *data, unsigned num_threads,
                   unsigned flags);
  int (*thread_num)(void);  /* omp_get_thread_num */
  int (*num_threads)(void); /* omp_get_num_threads */
} flashcpu_host_openmp;

/* A context's options. Layouts accepted: this one, and 0.1.0's, which ends
 * at max_isa (struct_size = offsetof(flashcpu_context_options, tune_file);
 * the fields it lacks keep their defaults).
 *
 * Settings: every choice of kernel and launch is a `key = value` entry of
 * one grammar, from these sources, each overriding the one before it:
 * the built-in defaults for this CPU, the tune file, the settings string,
 * then the fields team_level and max_team_size where they are not at their
 * defaults (a key given both as a field and in the string is an error).
 * Entries end at a newline or a ';'; blanks around keys and values are
 * ignored; '#' starts a comment to the end of the line; each key at most
 * once. The keys (docs/api.md says what each one does):
 *   splitkv_max_rows  0..64 (8): decode-shaped calls with up to this many
 *                     query rows take split-KV decode, more take prefill
 *   launch            pool | region (pool)
 *   prefill_bf16_dot  auto | on | off (auto = off)
 *   prefill_amx       auto | on | off (auto = on where AMX-BF16 runs)
 *   decode_bf16_dot   auto | on | off (auto = on for AMD CPUs with
 *                     AVX512-BF16)
 *   decode_prefetch   auto | l1 | l2 (auto = l1 on AMD CPUs, l2 elsewhere)
 *   kernel            auto | a kernel's name (flashcpu_kernel_info): every
 *                     call runs that kernel, and one it cannot compute
 *                     fails with FLASHCPU_ERROR_INVALID_ARGUMENT
 *   team_level        auto | core | l2 | l3 | numa (auto)
 *   max_team_size     0..4096 (0: no limit beyond the level)
 * An unknown key, a key given twice or a bad value makes
 * flashcpu_context_create return FLASHCPU_ERROR_INVALID_ARGUMENT with a
 * message naming the key and value (and, for a tune file, the file and
 * line). Settings never change the result of a given kernel: the output
 * bytes depend on the kernel chosen and the shape, never on the thread
 * count. */
typedef struct flashcpu_context_options {
  /* sizeof(flashcpu_context_options) as the caller compiled it; set by
   * flashcpu_context_options_init. */
  size_t struct_size;
  /* Threads for each call. 0: OMP_NUM_THREADS if set, else one thread per
   * core the process may run on (not per hyperthread). The calling thread
   * takes part as thread 0 and is never bound; the others are pinned one
   * per core where the OS supports binding, and kept in a pool between
   * calls (launch = pool) unless host_openmp is given. */
  int num_threads;
  flashcpu_team_level team_level; /* AUTO: the settings' team_level */
  int max_team_size; /* threads per team at most; 0: the settings' value */
  /* Highest ISA to use; AUTO (default) means the best present, and
   * FLASHCPU_ISA lowers it further. Asking for an ISA the CPU lacks is an
   * error. */
  flashcpu_isa max_isa;
  /* ---- 0.1.0's struct ends here. */
  /* A tune file (`flashcpu tune` writes one), read here: a first line
   * "flashcpu-tune 2", then entries as above. NULL: the file named by
   * FLASHCPU_TUNE_FILE if set, else none. A file that is missing,
   * unreadable or of another version is an error too. */
  const char *tune_file;
  /* Settings as text, e.g. "kernel = fc_prefill_12x32__avx512;
   * splitkv_max_rows = 8"; they win over the tune file's, key by key.
   * NULL or "": none. */
  const char *settings;
  /* Run each call as a parallel region of the host's OpenMP runtime, on
   * its threads where the host placed them, instead of flashcpu's own
   * pool (launch does not apply). A region that gets fewer threads than
   * num_threads (a nested call) runs every tile on the calling thread. The
   * struct is copied; its three pointers must be set. NULL (default):
   * flashcpu's own threads. */
  const flashcpu_host_openmp *host_openmp;
} flashcpu_context_options;

/* Fills *options with the defaults: every field 0 or NULL (AUTO), and
 * struct_size. */
FLASHCPU_API void
flashcpu_context_options_init(flashcpu_context_options *options);

/* Creates a context. options may be NULL for the defaults. On error *ctx is
 * set to NULL and flashcpu_last_error(NULL) describes the failure. */
FLASHCPU_API flashcpu_status flashcpu_context_create(
    const flashcpu_context_options *options, flashcpu_context **ctx);

/* Frees the context. NULL is accepted and ignored. */
FLASHCPU_API void flashcpu_context_destroy(flashcpu_context *ctx);

/* Wakes the context's own worker threads, which sleep after a few idle
 * milliseconds, ahead of a call, so that their waking overlaps the
 * caller's work. A no-op with one thread, host_openmp or launch = region.
 * Any thread, any time (a call running too); NULL is ignored. */
FLASHCPU_API void flashcpu_context_wake(flashcpu_context *ctx);

/* Threads a call on this context uses. */
FLASHCPU_API int flashcpu_context_num_threads(const flashcpu_context *ctx);
/* Teams the context's threads form. */
FLASHCPU_API int flashcpu_context_num_teams(const flashcpu_context *ctx);
/* The ISA the context's kernel table was filled for. */
FLASHCPU_API flashcpu_isa flashcpu_context_isa(const flashcpu_context *ctx);

/* One attention kernel of this build, written by flashcpu_kernel_info_get:
 * the caller sets struct_size (flashcpu_kernel_info_init) and the library
 * writes only the fields that fit in it. */
typedef struct flashcpu_kernel_info {
  size_t struct_size;
  const char *name;   /* e.g. "fc_prefill_12x32__avx512": what the setting
                         `kernel` takes */
  const char *family; /* "split-KV decode" or "prefill" */
  flashcpu_isa isa;   /* the ISA a context needs for it */
  int runnable;       /* 1 when this CPU and OS can run it, else 0 */
  /* The dtype of the softmax weights P in O += P V: f32, or bf16 for the
   * kernels that round P to bf16 (their error bound is that of P in
   * bf16). */
  flashcpu_dtype weights_dtype;
  /* 1 for a variant that only the setting `kernel` runs (the default
   * choice passes over it), else 0. */
  int forced_only;
} flashcpu_kernel_info;

/* Fills *info with zeros and its struct_size. */
FLASHCPU_API void flashcpu_kernel_info_init(flashcpu_kernel_info *info);

/* Fills *info with the index-th attention kernel of this build, in the
 * order the choice tries them (index from 0), and returns 1; returns 0 and
 * leaves *info untouched past the last one, when info is NULL, or when
 * info->struct_size is not a size this library knows (then
 * flashcpu_last_error(NULL) says so). Strings are the library's, valid
 * while it is loaded. */
FLASHCPU_API int flashcpu_kernel_info_get(int index,
                                          flashcpu_kernel_info *info);

/* The kernels the last successful flashcpu_attention or
 * flashcpu_attention_paged call on ctx ran, in the order they ran,
 * separated by ", "; "" before the first. Valid until the next call on
 * ctx. */
FLASHCPU_API const char *
flashcpu_context_last_kernels(const flashcpu_context *ctx);

/* Writes a human-readable description of the context's plan (topology,
 * teams, cores, caches, scratch, the kernel table and the settings) into
 * buffer, truncated to size bytes including the NUL. Returns the length the
 * full text needs (like snprintf). */
FLASHCPU_API size_t flashcpu_context_describe(const flashcpu_context *ctx,
                                              char *buffer, size_t size);

/* The message of the last failed call on ctx ("" after a successful call).
 * With ctx NULL: the last failure on this thread of a call that had no
 * usable context (flashcpu_context_create, flashcpu_kernel_info_get, or a
 * call passed ctx == NULL). Valid until the next call on the same context
 * / thread. */
FLASHCPU_API const char *flashcpu_last_error(const flashcpu_context *ctx);

/* ---------------------------------------------------------------- tensors */

/* "f32", "f16", "bf16", "i8", "u8", "f8_e4m3", "f8_e5m2", "q8_0";
 * "unknown" otherwise. */
FLASHCPU_API const char *flashcpu_dtype_name(flashcpu_dtype dtype);
/* Bytes per element; for Q8_0 bytes per block of 32 elements (34); 0 for
 * an unknown dtype. */
FLASHCPU_API size_t flashcpu_dtype_size(flashcpu_dtype dtype);
/* Elements per block: 32 for Q8_0, 1 for the others (0: unknown). */
FLASHCPU_API int64_t flashcpu_dtype_block(flashcpu_dtype dtype);

enum {
  FLASHCPU_DIM_BATCH = 0,
  FLASHCPU_DIM_SEQ = 1,
  FLASHCPU_DIM_HEADS = 2,
  FLASHCPU_DIM_HEAD_DIM = 3
};

/* A view. Inputs are only read and outputs (passed as const
 * flashcpu_tensor *: the view is not changed, its data is) are written, so
 * data is not const. */
typedef struct flashcpu_tensor {
  void *data;
  flashcpu_dtype dtype;
  int64_t dims[4];    /* [batch, seq, heads, head_dim] */
  int64_t strides[4]; /* in elements; strides[3] must be 1 */
} flashcpu_tensor;

/* ------------------------------------------------------ quantized K/V */

/* K and V (never q or out) may be stored quantized: I8, U8, F8_E4M3,
 * F8_E5M2 or Q8_0, each independently. Attention is defined over the
 * dequantized values, computed in f32:
 *
 *   value(b, s, h, d) = (code - zero(b, s, h, d)) * scale(b, s, h, d)
 *
 * the zero point only for U8 (0 for the others, and for U8 without zero
 * points). Exceptions, where integer or bf16 dot products compute the
 * scores and weighted values:
 *  - decode with an I8 or U8 K whose scales do not vary along a row (on
 *    AVX2 also: head_dim a multiple of 16) rounds each q row to 15-bit
 *    integers (to within 2^-15 of its largest element); where V is I8 or
 *    U8 too (on AVX2: v_head_dim a multiple of 16), each 16-key block's
 *    softmax weights times the V row scales are rounded to int16 (to
 *    within 2^-16 of the block's largest);
 *  - kernel fc_decode_splitkv_amx__amxint8 (K and V both I8 or both U8,
 *    head_dim = v_head_dim = 64 or 128): q as above, the weights to 15 bits
 *    per 64-key group (to within 2^-16 of the group's largest);
 *  - kernel fc_decode_splitkv_i8dot__avx512vnni: q to 8 bits (within
 *    1/254 of its row's largest), the weights to 8 bits (within 1/510 of
 *    the block's largest);
 *  - kernel fc_decode_splitkv_fp8dot__avx512bf16 (bf16 q, F8 K with scales
 *    not varying along a row): exact products of q and the codes, each
 *    sum times its row's scale: within f32 rounding of the dequantized
 *    result, not its very bytes;
 *  - kernel fc_decode_splitkv_f8__avx512 (F8 K or V, scales not varying
 *    along a row): dot products with the codes' values scaled per key
 *    afterwards, within f32 rounding of the dequantized result (blocks
 *    holding an E4M3 NaN code take the exact path).
 * `kernel = fc_decode_splitkv__avx512` (or __avx2) keeps decode in f32.
 *
 * The scales of a tensor are a view of their own:
 *   scale(b, s, h, d) = data[b * strides[0] + s * strides[1] +
 *                            h * strides[2] + d * strides[3]]
 * (a paged cache's: [page, slot, kv head, channel]), strides in elements,
 * non-negative, 0 broadcasting; zero points, where given, use the same
 * strides and dtype. So
 *   per tensor              {0, 0, 0, 0}
 *   per kv head             {0, 0, 1, 0}
 *   per token and kv head   {S * Hkv, Hkv, 1, 0}  (a page's [P, page, Hkv]:
 *                                                  {page * Hkv, Hkv, 1, 0})
 *   per channel             {0, 0, D, 1}
 * A NULL scales view means scale 1 and zero 0. Q8_0 carries its scales in
 * its blocks and takes none; its head_dim and every stride except
 * head_dim's are multiples of 32 elements (element e of a row lies in
 * block e / 32).
 *
 * flashcpu_quantize and flashcpu_kv_append write quantized values: rounded
 * to nearest (even), finite values beyond the format's range saturated to
 * its largest. Scales that vary by token (strides[1] != 0, strides[3] ==
 * 0) they compute, one per (token, kv head): I8 max|x| / 127; U8
 * (max - min) / 255 with zero point -min / scale (U8 needs zero_points
 * there); F8 max|x| / its largest (448 or 57344); Q8_0 d = max|x| / 127
 * per block; each rounded to nearest in its dtype, or up where that gives
 * 0 or a subnormal too small for the row's largest value (a row of tiny
 * values keeps them to within half a code step). A U8 row whose max equals
 * its min gets scale 1, zero point 0 if it is 0, else scale |x| / 255,
 * zero point -x / scale (codes 0). Other scales they read, and those must
 * be finite and > 0. A row (or block) holding NaN or inf gets a NaN
 * computed scale, so it reads as NaN; NaN in fp8 stays NaN, inf stays inf
 * in E5M2 and becomes NaN in E4M3; with read scales an I8 or U8 cache
 * cannot hold NaN or inf, and the call fails with nothing written. */
typedef struct flashcpu_kv_scales {
  void *data;           /* attention reads; quantize and kv_append write
                           the scales they compute */
  flashcpu_dtype dtype; /* f32, f16 or bf16 */
  int64_t strides[4];   /* [batch or page, seq or slot, kv head, channel] */
  void *zero_points;    /* U8 only (NULL: 0); same dtype and strides */
} flashcpu_kv_scales;

/* A view of a contiguous [batch, seq, heads, head_dim] buffer (BSHD). */
FLASHCPU_API flashcpu_tensor flashcpu_tensor_bshd(void *data,
                                                  flashcpu_dtype dtype,
                                                  int64_t batch, int64_t seq,
                                                  int64_t heads,
                                                  int64_t head_dim);
/* A view of a contiguous [batch, heads, seq, head_dim] buffer (BHSD). */
FLASHCPU_API flashcpu_tensor flashcpu_tensor_bhsd(void *data,
                                                  flashcpu_dtype dtype,
                                                  int64_t batch, int64_t heads,
                                                  int64_t seq,
                                                  int64_t head_dim);

/* ------------------------------------------------------------------ masks */

/* Tree mask over the newest num_keys keys (see the conventions above).
 * Bit t of query row i of batch b is bit (t % 64) of word
 *   bits[b * batch_stride + i * row_stride + t / 64].
 * It needs at least L rows (num_rows >= L), 1 <= num_keys <= S_b for every
 * batch, row_stride >= ceil(num_keys / 64); batch_stride 0 shares one mask
 * across the batch. All query heads share the mask. */
typedef struct flashcpu_tree_mask {
  const uint64_t *bits;
  int64_t num_rows;     /* query rows the mask describes */
  int64_t num_keys;     /* newest keys it covers */
  int64_t row_stride;   /* in 64-bit words */
  int64_t batch_stride; /* in 64-bit words; 0 to broadcast */
} flashcpu_tree_mask;

/* Additive float32 mask: the value for (batch b, q head h, query row i,
 * key j) is data[b*strides[0] + h*strides[1] + i*strides[2] + j*strides[3]]
 * for 0 <= j < S_b. Strides are in elements, non-negative, 0 broadcasts.
 * The caller guarantees the buffer covers [B, Hq, L, S] through them. */
typedef struct flashcpu_additive_mask {
  const float *data;
  int64_t strides[4]; /* [batch, q head, query row, key] */
} flashcpu_additive_mask;

/* ---------------------------------------------------------------- options */

/* Flag bits for flashcpu_attention_params.flags. Unknown bits are an error. */
#define FLASHCPU_FLAG_CAUSAL 0x1u

/* Layouts accepted: this one, and 0.1.0's, which ends at kv_lengths
 * (struct_size = offsetof(flashcpu_attention_params, sinks); the fields it
 * lacks keep their defaults). */
typedef struct flashcpu_attention_params {
  /* sizeof(flashcpu_attention_params) as the caller compiled it; set by
   * flashcpu_attention_params_init. */
  size_t struct_size;
  float scale;                         /* 0: 1/sqrt(D); must be finite */
  uint32_t flags;                      /* FLASHCPU_FLAG_* */
  int64_t window_left;                 /* -1: unbounded (default) */
  int64_t window_right;                /* -1: unbounded (default) */
  float softcap;                       /* 0: off (default); else > 0 */
  const flashcpu_tree_mask *tree_mask; /* NULL: none */
  const flashcpu_additive_mask *additive_mask; /* NULL: none */
  const int64_t *kv_lengths; /* NULL, or B lengths, each in [0, S] */
  /* ---- 0.1.0's struct ends here. */
  /* Attention sinks: one logit per query head, [Hq], in sinks_dtype (f32,
   * f16 or bf16). The sink joins every row's softmax as one more key whose
   * score is sinks[h] (not scaled, capped or masked) and whose value is
   * zero: out = sum_j exp(s_j) v_j / (exp(sink) + sum_j exp(s_j)). lse
   * includes it, so a row that sees no key gets output 0 and lse =
   * sinks[h]. When merging partial results with flashcpu_merge_states,
   * give the sinks to exactly one of them. NULL: none. */
  const void *sinks;
  flashcpu_dtype sinks_dtype;
  /* ALiBi: float32 slopes, [Hq] with alibi_batch_stride 0, or [B, Hq] with
   * alibi_batch_stride >= Hq (floats between batches). Row i at position
   * p = i + (S_b - L) gets the bias -slope[h] * |p - j| on its score for
   * key j, added after the softcap, with the additive mask. NULL: none. */
  const float *alibi_slopes;
  int64_t alibi_batch_stride;
  /* Scales of a quantized k and v (see "quantized K/V"); NULL for f32,
   * f16, bf16 and Q8_0, and for scale 1. flashcpu_attention_paged takes
   * them from the flashcpu_paged_kv instead: there they must be NULL. */
  const flashcpu_kv_scales *k_scales, *v_scales;
  /* Queries placed past the view's keys, for a sequence whose keys are
   * split across calls or processes (each part's result merged with
   * flashcpu_merge_states): B values (flashcpu_attention_paged: R, one per
   * request), each in [-2^62, 2^62]. Query row i of batch b is then at
   * position p = i + (S_b - L) + query_offsets[b] for causal, the window
   * and ALiBi, so a part holding keys [a, a + n) of a sequence of S keys
   * passes its n keys and the offset S - (a + n). The tree mask still
   * covers the view's newest keys. NULL: 0 for every batch. */
  const int64_t *query_offsets;
} flashcpu_attention_params;

/* Fills *params with the defaults: scale 0, no flags, window (-1, -1),
 * no softcap, no masks, no kv lengths, no sinks, no ALiBi, no scales, no
 * query offsets. */
FLASHCPU_API void
flashcpu_attention_params_init(flashcpu_attention_params *params);

/* -------------------------------------------------------------- attention */

/* Computes attention into out (and lse when it is not NULL).
 * params may be NULL for the defaults (plain, non-causal attention).
 * out and lse must not overlap any input, each other, or themselves.
 * Returns FLASHCPU_OK, or an error status with nothing written. */
FLASHCPU_API flashcpu_status flashcpu_attention(
    flashcpu_context *ctx, const flashcpu_tensor *q, const flashcpu_tensor *k,
    const flashcpu_tensor *v, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params);

/* ------------------------------------------ paged KV caches, ragged batches */

/* An engine's step in one call per layer. The KV cache is a pool of pages
 * of page_size tokens; each request owns a row of a block table listing its
 * pages; one step packs requests of any kind (decode rows, speculative-
 * verify rows under a tree mask, chunks of prefill against a cached prefix)
 * into one ragged batch of query rows. Per step:
 *
 *   flashcpu_kv_append(ctx, k_new, v_new, slot_mapping, &cache);  per layer
 *   flashcpu_plan_create(ctx, &batch, Hq, q_dt, out_dt, &cache, &plan); once
 *   flashcpu_attention_paged(ctx, plan, q, &cache, out, lse, p);  per layer
 *   flashcpu_plan_destroy(plan);
 *
 * Every convention of flashcpu_attention holds per request: request r is a
 * batch of its own with L_r = cu_seqlens_q[r + 1] - cu_seqlens_q[r] query
 * rows and S_r = seq_lens_kv[r] keys (the cached prefix and this step's
 * new tokens, appended first), masks aligned bottom-right to them. For the
 * same problem, the paged path writes the same bytes as flashcpu_attention
 * on contiguous K/V with the same kernel, whatever the page size. */

/* One layer's paged K and V. Token j of a request whose block table row is
 * `pages` lies in page pages[j / page_size], slot j % page_size; element d
 * of kv head h of that token is at
 *   k + page * k_strides[0] + slot * k_strides[1] + h * k_strides[2] + d
 * (in elements of k_dtype; likewise v). Strides are non-negative; head_dim
 * is contiguous. This covers NHD pages [num_pages, page_size, Hkv, D]
 * (flashcpu_paged_kv_nhd), HND pages [num_pages, Hkv, page_size, D]
 * (flashcpu_paged_kv_hnd), and K and V in one buffer (v = k + the K/V
 * stride). */
typedef struct flashcpu_paged_kv {
  /* sizeof(flashcpu_paged_kv) as the caller compiled it; set by
   * flashcpu_paged_kv_nhd, flashcpu_paged_kv_hnd and
   * flashcpu_paged_kv_init. */
  size_t struct_size;
  void *k, *v; /* flashcpu_attention_paged reads; flashcpu_kv_append writes */
  flashcpu_dtype k_dtype, v_dtype; /* f32, f16, bf16 */
  int64_t num_pages, page_size;    /* pages in the pool; tokens per page */
  int64_t kv_heads, head_dim, v_head_dim;
  int64_t k_strides[3]; /* [page, slot, kv head], in elements */
  int64_t v_strides[3];
  /* Scales of quantized pages, strides [page, slot, kv head, channel]
   * (see "quantized K/V"); NULL for f32, f16, bf16 and Q8_0 pages and for
   * scale 1. flashcpu_kv_append writes the per-token ones. */
  const flashcpu_kv_scales *k_scales, *v_scales;
} flashcpu_paged_kv;

/* Fills *kv with zeros and its struct_size. */
FLASHCPU_API void flashcpu_paged_kv_init(flashcpu_paged_kv *kv);

/* K and V pages [num_pages, page_size, kv_heads, head_dim] (NHD), two
 * buffers of one dtype. */
FLASHCPU_API flashcpu_paged_kv
flashcpu_paged_kv_nhd(void *k, void *v, flashcpu_dtype dtype, int64_t num_pages,
                      int64_t page_size, int64_t kv_heads, int64_t head_dim);
/* K and V pages [num_pages, kv_heads, page_size, head_dim] (HND). */
FLASHCPU_API flashcpu_paged_kv
flashcpu_paged_kv_hnd(void *k, void *v, flashcpu_dtype dtype, int64_t num_pages,
                      int64_t page_size, int64_t kv_heads, int64_t head_dim);

/* The lengths of one step, the same for every layer. */
typedef struct flashcpu_batch {
  /* sizeof(flashcpu_batch) as the caller compiled it; set by
   * flashcpu_batch_init. */
  size_t struct_size;
  int64_t num_requests; /* R >= 1 */
  /* int32 [R + 1]: request r's query rows are packed rows
   * cu_seqlens_q[r] .. cu_seqlens_q[r + 1] - 1 of q and out; cu_seqlens_q[0]
   * is 0, the values do not decrease, and T = cu_seqlens_q[R] is the
   * number of packed rows. A request may have no rows. */
  const int32_t *cu_seqlens_q;
  /* int32 [R]: keys of request r, S_r >= 0 (usually its cached prefix
   * plus its L_r new tokens; rows that see no key get 0 and lse -inf). */
  const int32_t *seq_lens_kv;
  /* int32 [R][block_table_stride] (the FlashAttention / vLLM convention):
   * key j of request r is in page block_table[r * block_table_stride +
   * j / page_size]. Only the ceil(S_r / page_size) entries a request uses
   * are read, each must be in [0, num_pages), and a row must have room for
   * them (block_table_stride >= ceil(S_r / page_size)). */
  const int32_t *block_table;
  int64_t block_table_stride;
  /* Optional int32 [R + 1], FlashInfer's paged-KV indptr: request r's
   * pages are block_table[block_offsets[r] .. block_offsets[r + 1] - 1]
   * (FlashInfer's indices), and block_table_stride is not used. The values
   * do not decrease, and each request's range holds its pages. NULL: rows
   * of block_table_stride. */
  const int32_t *block_offsets;
  /* Optional tree masks of speculative-verify requests, in the type
   * flashcpu_attention takes, over the T packed rows: num_rows >= T,
   * batch_stride 0, num_keys >= every tree_num_keys[r]. Request r with
   * tree_num_keys[r] = n > 0 (n <= S_r) is masked as flashcpu_tree_mask
   * says for num_keys = n: key j >= S_r - n is visible to its packed row q
   * only if bit (j - (S_r - n)) is set, bit t being bit t % 64 of
   * bits[q * row_stride + t / 64]. n = 0: no tree. Both NULL: no trees. */
  const flashcpu_tree_mask *tree_mask;
  const int32_t *tree_num_keys;
} flashcpu_batch;

/* Fills *batch with zeros and its struct_size. */
FLASHCPU_API void flashcpu_batch_init(flashcpu_batch *batch);

typedef struct flashcpu_plan flashcpu_plan;

/* Plans a step on ctx for q_heads query heads, q of q_dtype and out of
 * out_dtype (f32, f16 or bf16), over caches described by kv (its
 * num_pages, page_size, kv_heads, head_dim, v_head_dim, dtypes and scale
 * layout; its data is not read): checks the lengths, every block-table
 * entry the requests use and the tree masks once, copies them (the batch's
 * arrays may change once this returns), chooses each request's kernel
 * (split-KV decode for up to splitkv_max_rows rows, else prefill), plans
 * its tiles and workspace, and reserves the context's memory for them, so
 * that flashcpu_attention_paged only binds the layer's data and launches,
 * allocating nothing. On error *plan is NULL and nothing was allocated; the
 * message names the argument and the index. */
FLASHCPU_API flashcpu_status flashcpu_plan_create(
    flashcpu_context *ctx, const flashcpu_batch *batch, int64_t q_heads,
    flashcpu_dtype q_dtype, flashcpu_dtype out_dtype,
    const flashcpu_paged_kv *kv, flashcpu_plan **plan);

/* Bytes of workspace a call on the plan uses (split-KV's partial states),
 * for a caller that provides its own (0 for a NULL plan). */
FLASHCPU_API size_t flashcpu_plan_workspace_size(const flashcpu_plan *plan);

/* Makes the plan's calls use the caller's workspace (64-byte aligned, at
 * least flashcpu_plan_workspace_size bytes) instead of the context's; NULL
 * goes back to the context's. The caller keeps it alive while the plan is
 * used and never gives one workspace to two calls running at once. Errors:
 * BAD_LAYOUT (misaligned), INVALID_ARGUMENT (too small); the plan is then
 * unchanged. */
FLASHCPU_API flashcpu_status flashcpu_plan_set_workspace(flashcpu_context *ctx,
                                                         flashcpu_plan *plan,
                                                         void *workspace,
                                                         size_t size);

/* Frees a plan (before or after its context). NULL is ignored. */
FLASHCPU_API void flashcpu_plan_destroy(flashcpu_plan *plan);

/* Packed query rows T of the plan's batch. */
FLASHCPU_API int64_t flashcpu_plan_num_tokens(const flashcpu_plan *plan);

/* Writes what the plan runs (requests per kernel family, rows, keys), like
 * flashcpu_context_describe. Returns the length the full text needs. */
FLASHCPU_API size_t flashcpu_plan_describe(const flashcpu_plan *plan,
                                           char *buffer, size_t size);

/* Attention for the plan's step on one layer's paged cache:
 *   q   [1, T, Hq, D]   packed query rows (a view: any strides, head_dim
 *                       contiguous), f32/f16/bf16
 *   kv  the layer's pages, shaped as the plan's, of its dtypes and scale
 *       layout (a layer of other dtypes needs a plan of its own)
 *   out [1, T, Hq, Dv]  f32/f16/bf16
 *   lse float32 [Hq, T] contiguous (FlashAttention's varlen layout), or NULL
 * params as for flashcpu_attention (NULL: defaults), except that the
 * lengths and tree masks come from the plan: params->kv_lengths and
 * params->tree_mask must be NULL. An additive mask's value for request r,
 * head h, its row i, key j is at r * strides[0] + h * strides[1] +
 * (cu_seqlens_q[r] + i) * strides[2] + j * strides[3]; ALiBi slopes are
 * [Hq] or [R, Hq]. q and out are of the plan's dtypes. ctx must be the
 * plan's context. Returns FLASHCPU_OK, or an error status with nothing
 * written. */
FLASHCPU_API flashcpu_status flashcpu_attention_paged(
    flashcpu_context *ctx, const flashcpu_plan *plan, const flashcpu_tensor *q,
    const flashcpu_paged_kv *kv, const flashcpu_tensor *out, float *lse,
    const flashcpu_attention_params *params);

/* Writes a step's new K and V rows into their pages (vLLM's
 * reshape_and_cache): k_new [1, T, Hkv, D] and v_new [1, T, Hkv, Dv] views
 * (f32, f16 or bf16), converted to the cache's dtypes on the way (rounding
 * to nearest even; NaN stays NaN; quantized pages as "quantized K/V"
 * says, their per-token scales written into the cache's scales views),
 * and slot_mapping int64 [T]: row t goes to
 * token slot slot_mapping[t] = page * page_size + offset of the cache;
 * -1 skips the row. Every slot must be -1 or in [0, num_pages *
 * page_size), and no slot may appear twice in one call. Checked before
 * anything is written: on error the cache is untouched. */
FLASHCPU_API flashcpu_status flashcpu_kv_append(flashcpu_context *ctx,
                                                const flashcpu_tensor *k_new,
                                                const flashcpu_tensor *v_new,
                                                const int64_t *slot_mapping,
                                                const flashcpu_paged_kv *kv);

/* ----------------------------------------------- quantize and dequantize */

/* For engines that manage their own caches: src [B, S, H, D] (f32, f16 or
 * bf16) quantized into dst (same dims; I8, U8, F8_E4M3, F8_E5M2 or Q8_0)
 * with dst_scales (NULL: scale 1; must be NULL for Q8_0), computing the
 * scales that vary by token and reading the others, as "quantized K/V"
 * says. dst and its scales must not overlap src. Nothing is written on
 * error. */
FLASHCPU_API flashcpu_status flashcpu_quantize(
    flashcpu_context *ctx, const flashcpu_tensor *src,
    const flashcpu_tensor *dst, const flashcpu_kv_scales *dst_scales);

/* The values attention reads from a quantized src (with src_scales, NULL:
 * scale 1) into dst (same dims; f32, f16 or bf16). */
FLASHCPU_API flashcpu_status flashcpu_dequantize(
    flashcpu_context *ctx, const flashcpu_tensor *src,
    const flashcpu_kv_scales *src_scales, const flashcpu_tensor *dst);

/* ------------------------------------------------------------------ merge */

/* Merges partial attention results into the result over the union of their
 * keys: for cascade attention, shared prefixes, or work split across
 * processes. Each of the count >= 1 states is what flashcpu_attention wrote
 * for the same queries over a disjoint set of keys:
 *   states[i]      [B, L, H, Dv] view, any dtype (f32, f16, bf16)
 *   state_lse[i]   float32 [B, H, L], contiguous, natural log
 * and the merge writes
 *   out            [B, L, H, Dv] view, any dtype
 *   lse            float32 [B, H, L] or NULL
 * as out = sum_i w_i * states[i], w_i = exp(state_lse[i] - lse),
 * lse = log(sum_i exp(state_lse[i])). A state whose lse is -INFINITY saw no
 * key and contributes nothing (its out values are not read); when every
 * state is empty the row gets 0 and -INFINITY, never NaN. NaN in a state's
 * lse or in the out values it contributes propagates to the row. States
 * are merged pairwise in a tree of fixed shape (state i + 2^k into state i
 * at level k), in f32, so the bytes do not depend on the thread count.
 * out and lse must not overlap any state, state lse, or each other.
 * Returns FLASHCPU_OK, or an error status with nothing written. */
FLASHCPU_API flashcpu_status flashcpu_merge_states(
    flashcpu_context *ctx, int64_t count, const flashcpu_tensor *states,
    const float *const *state_lse, const flashcpu_tensor *out, float *lse);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCPU_FLASHCPU_H */
