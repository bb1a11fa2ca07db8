/* The registry as data: the rows of kernels.inc as arrays that dispatch,
 * the tests, the benchmarks and `flashcpu tune` walk. */
#ifndef FLASHCPU_KERNELS_REGISTRY_H
#define FLASHCPU_KERNELS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/convert/convert.h"
#include "kernels/kernel_env.h"
#include "kernels/kernel_plan.h"
#include "kernels/merge/merge_states.h"

typedef enum fc_kernel_family {
  FC_FAMILY_SPLITKV, /* split-KV decode: 1..FC_SPLITKV_MAX_ROWS rows */
  FC_FAMILY_PREFILL  /* any number of rows */
} fc_kernel_family;

/* A CPU feature a kernel needs beyond its ISA's. */
typedef enum fc_cpu_need {
  FC_NEED_NONE,
  FC_NEED_AVX512_BF16,
  FC_NEED_AVX512_VNNI,
  FC_NEED_AMX_BF16,     /* AMX-BF16 tiles granted by the OS, and AVX512-BF16 */
  FC_NEED_AMX_INT8,     /* AMX-INT8 tiles granted by the OS, and AVX512-VNNI */
  FC_NEED_AMX_BF16_VBMI /* FC_NEED_AMX_BF16, and AVX512-VBMI's byte shuffles */
} fc_cpu_need;

/* Whether the choice considers a row (kernels.inc). */
typedef enum fc_row_status { FC_ROW_CHOSEN, FC_ROW_FORCED_ONLY } fc_row_status;

/* Whether a kernel can compute p; false with a short reason in why. */
typedef bool (*fc_takes_fn)(const fc_problem *p, char *why, size_t size);
/* Whether the settings choose the kernel for p by default (p is one it
 * takes); false with a short reason in why. */
typedef bool (*fc_wanted_fn)(const fc_problem *p,
                             const fc_kernel_settings *settings, char *why,
                             size_t size);

typedef struct fc_attention_kernel {
  const char *name;          /* the symbol's name */
  fc_attention_plan_fn plan; /* kernels/kernel_plan.h */
  fc_kernel_family family;
  flashcpu_isa isa;
  fc_cpu_need need;
  fc_row_status status;
  fc_takes_fn takes;      /* NULL: every problem */
  fc_wanted_fn wanted;    /* NULL: every problem it takes */
  flashcpu_dtype weights; /* P's dtype in O += P V */
  int64_t tile_slots;     /* prefill blocking: query slots per tile */
} fc_attention_kernel;

typedef flashcpu_status (*fc_merge_fn)(const fc_kernel_env *env,
                                       const fc_merge_problem *m);

typedef struct fc_merge_kernel {
  const char *name;
  fc_merge_fn run;
  flashcpu_isa isa;
} fc_merge_kernel;

typedef struct fc_dequant_kernel {
  const char *name;
  fc_dequant_row_fn run;
  flashcpu_isa isa;
} fc_dequant_kernel;

typedef struct fc_row_converter {
  const char *name;
  fc_row_to_f32_fn run;
  flashcpu_isa isa;
  flashcpu_dtype dtype;
} fc_row_converter;

/* Every attention kernel this build has, in the order of the choice. */
extern const fc_attention_kernel fc_attention_kernels[];
extern const size_t fc_attention_kernel_count;
extern const fc_merge_kernel fc_merge_kernels[];
extern const size_t fc_merge_kernel_count;
extern const fc_dequant_kernel fc_dequant_kernels[];
extern const size_t fc_dequant_kernel_count;
extern const fc_row_converter fc_row_converters[];
extern const size_t fc_row_converter_count;

/* The row called name, or NULL. */
const fc_attention_kernel *fc_attention_kernel_find(const char *name);
/* "split-KV decode" or "prefill". */
const char *fc_kernel_family_name(fc_kernel_family family);
/* The query slots per prefill tile the kernel runs with under settings s:
 * the setting prefill_tile_slots where given, else the row's. */
int64_t fc_kernel_tile_slots(const fc_attention_kernel *kernel,
                             const fc_kernel_settings *s);
/* Whether a kernel can compute p: its takes() (reason in why). */
bool fc_kernel_takes(const fc_attention_kernel *kernel, const fc_problem *p,
                     char *why, size_t size);

/* The predicates the rows name. */
bool fc_takes_splitkv(const fc_problem *p, char *why, size_t size);
bool fc_takes_splitkv_bf16_dot(const fc_problem *p, char *why, size_t size);
/* bf16 q and an F8_E4M3 or F8_E5M2 K whose scales do not vary along a
 * row. */
bool fc_takes_splitkv_fp8_dot(const fc_problem *p, char *why, size_t size);
/* An F8_E4M3 or F8_E5M2 K or V whose scales do not vary along a row (the
 * AVX-512 F8 kernel reads it in place before its scale). */
bool fc_takes_splitkv_f8(const fc_problem *p, char *why, size_t size);
/* I8 or U8 K read in place with one scale per row, head_dim <= 256 (the
 * int32 sums of 15-bit q and 8-bit codes cannot overflow). */
bool fc_takes_splitkv_int_dot(const fc_problem *p, char *why, size_t size);
/* I8 K and V, or U8 K and V, read in place with one scale per row, and
 * head_dim = v_head_dim = 64 or 128 (the AMX-INT8 decode kernel). */
bool fc_takes_splitkv_amx_int8(const fc_problem *p, char *why, size_t size);
/* bf16 q, K and V with head_dim = v_head_dim a multiple of 32 up to 128
 * (the AMX-BF16 decode kernel). */
bool fc_takes_splitkv_amx_bf16(const fc_problem *p, char *why, size_t size);
/* bf16 q, F8_E4M3 or F8_E5M2 K and V whose scales do not vary along a
 * row, head_dim = v_head_dim a multiple of 32 up to 128 (the AMX-BF16 F8
 * decode kernel). */
bool fc_takes_splitkv_amx_f8(const fc_problem *p, char *why, size_t size);
bool fc_takes_prefill_bf16_dot(const fc_problem *p, char *why, size_t size);
bool fc_takes_prefill_amx(const fc_problem *p, char *why, size_t size);
bool fc_wants_splitkv(const fc_problem *p, const fc_kernel_settings *s,
                      char *why, size_t size);
bool fc_wants_splitkv_bf16_dot(const fc_problem *p, const fc_kernel_settings *s,
                               char *why, size_t size);
/* Decode shapes with two chunks or more per kv head (q_len x group >= 8,
 * e.g. speculative decoding's verify): the AMX-BF16 decode kernels share
 * each K and V tile between them. */
bool fc_wants_splitkv_amx_bf16(const fc_problem *p, const fc_kernel_settings *s,
                               char *why, size_t size);
bool fc_wants_prefill_bf16_dot(const fc_problem *p, const fc_kernel_settings *s,
                               char *why, size_t size);
bool fc_wants_prefill_amx(const fc_problem *p, const fc_kernel_settings *s,
                          char *why, size_t size);

/* The prototypes of every row's symbol. */
#define FC_ATTENTION_KERNEL(symbol, family, isa, cpu_need, status, takes,      \
                            wanted, weights, tile_slots)                       \
  flashcpu_status symbol(const fc_kernel_env *env, const fc_problem *p,        \
                         fc_kernel_plan *plan);
#define FC_MERGE_KERNEL(symbol, isa)                                           \
  flashcpu_status symbol(const fc_kernel_env *env, const fc_merge_problem *m);
#define FC_ROW_CONVERTER(symbol, isa, dtype)                                   \
  void symbol(const void *source, int64_t count, float factor,                 \
              float *destination);
#define FC_DEQUANT_KERNEL(symbol, isa)                                         \
  void symbol(flashcpu_dtype dtype, const char *row, int64_t count,            \
              const fc_row_scales *scales, float *destination);
#include "kernels/kernels.inc"

#endif
