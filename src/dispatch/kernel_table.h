/* The kernel table: which implementation of each kernel a context uses,
 * filled once per context from the CPU's features and the ISA cap. It says
 * what the hardware can do; the team plan (src/runtime) says how to run it. */
#ifndef FLASHCPU_DISPATCH_KERNEL_TABLE_H
#define FLASHCPU_DISPATCH_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "dispatch/cpu_features.h"
#include "flashcpu/flashcpu.h"
#include "kernels/convert/convert.h"

/* The split-KV kernel's bf16 scores function (kernels/decode). */
struct fc_prefetch_sweep;
typedef void (*fc_splitkv_bf16_scores_fn)(const char *const *k_rows,
                                          const uint16_t *q, int64_t q_stride,
                                          int64_t dim, int64_t n, float factor,
                                          struct fc_prefetch_sweep *sweep,
                                          float *scores);

struct fc_runtime;
struct fc_problem;
struct fc_kernel_table;

/* An attention kernel: runs the whole checked problem on the runtime. */
typedef flashcpu_status (*fc_attention_fn)(flashcpu_context *ctx,
                                           struct fc_runtime *runtime,
                                           const struct fc_kernel_table *table,
                                           const struct fc_problem *p);

/* When decode-shaped problems (few query rows) take which kernel. The
 * inputs are the shape only, never the thread count: the kernels sum in
 * different orders, and the output bytes must not depend on the threads.
 * Defaults are measured (bench/LOG-early.md, bench/LOG.md); a `flashcpu
 * tune` file can replace them. */
typedef struct fc_decode_thresholds {
  /* One-pass decode (one thread streams a whole (batch, kv head)) when
   * batch x kv_heads >= this (0: never)... */
  int64_t onepass_min_tiles;
  /* ...or when the KV is at most this long (0: never). */
  int64_t onepass_max_kv;
  /* Split-KV for up to this many query rows; more go to the tiled kernel.
   * At most FC_SPLITKV_MAX_ROWS. */
  int64_t splitkv_max_rows;
} fc_decode_thresholds;

typedef struct fc_kernel_table {
  flashcpu_isa isa; /* the ISA the table was filled for */
  fc_row_to_f32_fn row_to_f32[3]; /* indexed by flashcpu_dtype */
  const char *row_to_f32_names[3];
  /* Any number of query rows: the SIMD prefill kernel of the ISA (the
   * portable tiled kernel for scalar). */
  fc_attention_fn tiled;
  const char *tiled_name;
  /* The same for bf16 Q and K with an even head_dim, by AVX512-BF16 dot
   * products; NULL unless FLASHCPU_PREFILL_BF16_DOT=1 asked for it (read
   * once, when the table is filled) and the CPU has them. */
  fc_attention_fn tiled_bf16_dot;
  const char *tiled_bf16_dot_name;
  /* One query row, one pass over K/V per GQA group; NULL where the ISA has
   * none (then tiled runs decode too). */
  fc_attention_fn decode;
  const char *decode_name;
  /* 1..FC_SPLITKV_MAX_ROWS query rows, keys cut into splits whose partial
   * states merge in a fixed tree (FlashDecoding); NULL where none. */
  fc_attention_fn decode_splitkv;
  const char *decode_splitkv_name;
  /* Its scores from bf16 q and K by AVX512-BF16 dot products; NULL where
   * the CPU has none, and by default on CPUs other than AMD's, where they
   * ran slower than widening (FLASHCPU_DECODE_BF16_DOT=1 / =0 forces them
   * on / off; read once, when the table is filled). */
  fc_splitkv_bf16_scores_fn decode_bf16_scores;
  const char *decode_bf16_scores_name;
  /* Split-KV decode prefetches the next key block into L1 rather than L2:
   * by default on AMD CPUs (faster on the 2-core AMD VM, slower on the
   * 16-core Xeon; FLASHCPU_DECODE_PREFETCH=l1 / =l2 forces either; read
   * once, when the table is filled). */
  bool decode_prefetch_l1;
  fc_decode_thresholds decode_thresholds;
} fc_kernel_table;

fc_decode_thresholds fc_decode_thresholds_default(void);
/* Sets the field called name[0..length) (a field name above) to value.
 * Returns 0; -1 when no field has that name; -2 when value is out of the
 * field's range [0, *max] (*max is set when max is not NULL and the name
 * is known). */
int fc_decode_thresholds_set(fc_decode_thresholds *t, const char *name,
                             size_t length, long long value, long long *max);
/* Overrides fields from "name=value[,name=value...]" (the field names
 * above, values >= 0; FLASHCPU_DECODE_THRESHOLDS). Returns 0, or -1 for
 * text it cannot read (then *t may be partly changed). */
int fc_decode_thresholds_parse(const char *text, fc_decode_thresholds *t);

/* The kernel for a problem, its name, and why it was chosen (a line for
 * FLASHCPU_VERBOSE) in reason. */
fc_attention_fn fc_kernel_table_choose(const fc_kernel_table *table,
                                       const struct fc_problem *p,
                                       int team_size_min, const char **name,
                                       char *reason, size_t reason_size);

/* The best ISA the features allow, capped by `cap` (AUTO: no cap). */
flashcpu_isa fc_best_isa(const fc_cpu_features *features, flashcpu_isa cap);
/* Whether the features allow isa at all. */
int fc_isa_supported(const fc_cpu_features *features, flashcpu_isa isa);

/* Parses FLASHCPU_ISA's value: returns the ISA, AUTO for NULL/empty, or -1
 * for text that names no ISA. */
int fc_isa_parse(const char *text);

void fc_kernel_table_fill(fc_kernel_table *table, flashcpu_isa isa);

#endif
