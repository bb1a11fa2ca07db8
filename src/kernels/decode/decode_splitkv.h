/* Split-KV decode (FlashDecoding): 1 to FC_SPLITKV_MAX_ROWS query rows; the
 * keys of each (batch, kv head) cut into fixed-size splits that run as
 * separate tiles, their partial states merged in a fixed tree. */
#ifndef FLASHCPU_KERNELS_DECODE_DECODE_SPLITKV_H
#define FLASHCPU_KERNELS_DECODE_DECODE_SPLITKV_H

#include <stdbool.h>
#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/kernel_env.h"
#include "kernels/kernel_plan.h"
#include "runtime/runtime.h"

struct fc_prefetch_sweep;

/* Query rows the kernel takes (speculative verification: 2..64). */
#define FC_SPLITKV_MAX_ROWS 64
/* Keys per block every split-KV kernel walks; splits are multiples. Slots
 * (query row x group head) go in chunks of 4 that share the block's loads;
 * AVX-512's scores reduce 4 keys of the chunk's slots together. */
enum {
  FC_SPLITKV_KEY_BLOCK = 16,
  FC_SPLITKV_CHUNK = 4,
  FC_SPLITKV_KEYS_PER_GROUP = 4
};

/* How the keys of a (batch, kv head) are cut: from the shape and constants
 * only, never from the thread count, so the bytes never depend on it. The
 * split size follows the longest kv length of the call; each batch has as
 * many splits as its own length needs. */
typedef struct fc_splitkv_plan {
  int64_t split_keys; /* keys per split, a multiple of 16 */
  int64_t splits;     /* of the longest batch, >= 1 */
  int64_t slots;      /* query rows x GQA group heads (the largest batch) */
} fc_splitkv_plan;

fc_splitkv_plan fc_splitkv_make_plan(const fc_problem *p);

/* Splits of a batch with kv_length keys: at least 1 (an empty batch still
 * writes its rows). */
static inline int64_t fc_splitkv_splits_of(const fc_splitkv_plan *plan,
                                           int64_t kv_length) {
  const int64_t splits = (kv_length + plan->split_keys - 1) / plan->split_keys;
  return splits < 1 ? 1 : splits;
}

/* Split-KV scores of a chunk's 4 slots for a 16-key block from bf16 q and
 * K rows read in place (k: the rows with their scales; k_dtype: BF16, or
 * F8_E4M3 / F8_E5M2 for the rows that take fp8 K) by dot products:
 * scores[16 * s + j] = factor * (q_s . k_j). q_s is the raw bf16 row of
 * slot s at q + s * q_stride, zero-padded to a multiple of 32 elements;
 * rows past n repeat a valid row (their lanes are garbage). sweep: the
 * prefetch stream to advance a line per line read (NULL: none). */
struct fc_splitkv_rows;
typedef void (*fc_splitkv_bf16_scores_fn)(const struct fc_splitkv_rows *k,
                                          flashcpu_dtype k_dtype,
                                          const uint16_t *q, int64_t q_stride,
                                          int64_t dim, int64_t n, float factor,
                                          struct fc_prefetch_sweep *sweep,
                                          float *scores);

/* The AVX-512 split-KV kernel with its scores from bf16_scores where q is
 * bf16 and K is bf16, or F8_E4M3 / F8_E5M2 read in place (the rows that
 * pass an fp8 hook take only those; NULL: by widening K to f32 and FMA). */
flashcpu_status fc_splitkv_plan_avx512(const fc_kernel_env *env,
                                       const fc_problem *p,
                                       fc_kernel_plan *plan,
                                       fc_splitkv_bf16_scores_fn bf16_scores);

/* The AVX-512 split-KV kernel with F8 K and V rows (scales not varying
 * along a row) read before their scale: each key's scale multiplies its
 * dot products and its weights instead of each element (an E4M3 row as
 * its values times 2^-8 through f16, an E5M2 row exactly; blocks holding
 * an E4M3 NaN code, or whose scale times 2^8 is not finite, dequantize
 * each element as the f32 kernel). */
flashcpu_status fc_splitkv_plan_avx512_f8(const fc_kernel_env *env,
                                          const fc_problem *p,
                                          fc_kernel_plan *plan);

/* A chunk's q rounded to integers for integer dot-product scores: slot s's
 * row is codes + s * stride (int16, |code| <= 16383, zero-padded to a
 * multiple of 32 elements; with a q limit of 127, int8 codes at the same
 * address: (const int8_t *)(codes + s * stride)), q_s[d] ~ codes[d] *
 * scale[s], and sum[s] is the sum of its codes (zero points). */
typedef struct fc_splitkv_int_q {
  const int16_t *codes;
  int64_t stride;
  const float *scale, *sum; /* FC_SPLITKV_CHUNK each */
} fc_splitkv_int_q;

/* Split-KV scores of a chunk's 4 slots for a 16-key block of I8 or U8 K
 * rows read in place (k: rows with their scales and zero points):
 * scores[16 * s + j] = q_s . k_j with q from q. sweep as for bf16. */
typedef void (*fc_splitkv_int_scores_fn)(const struct fc_splitkv_rows *k,
                                         flashcpu_dtype k_dtype,
                                         const fc_splitkv_int_q *q, int64_t dim,
                                         int64_t n,
                                         struct fc_prefetch_sweep *sweep,
                                         float *scores);

/* Split-KV values of a chunk's 4 slots for a 16-key block of I8 or U8 V
 * rows read in place, by integer dot products: o[s] = alpha[s] * o[s] +
 * sum_j w[s][j] v_j (o rows padded_dv apart, weights [slot][key], keys a
 * slot does not see by seen[s]'s bits weigh 0). Each slot's weights times
 * their row's scale are rounded to int16 against the block's largest, as
 * fc_splitkv_int_weights holds them. Returns false, having touched
 * nothing, where that rounding cannot hold them (a weight or scale not
 * finite, or a largest weight so small that 32767 / largest overflows):
 * the caller runs the f32 path. */
typedef bool (*fc_splitkv_int_values_fn)(
    const struct fc_splitkv_rows *v, flashcpu_dtype v_dtype, int64_t dv,
    int64_t padded_dv, int64_t n, float *o, const float *weights,
    const float *alpha, const unsigned *seen, struct fc_prefetch_sweep *sweep);

/* A chunk's weights for one block, rounded: code = rint(w * scale_j *
 * 32767 / largest) with largest the slot's largest |w * scale_j|; pairs[s]
 * holds keys j and j + 1 in int32 j / 2 (low half j), and o gets step[s] *
 * (sum_j code_j code(v_j) - offset[s]), step = largest / 32767, offset =
 * sum_j code_j zero_j (U8; 0 for I8). */
typedef struct fc_splitkv_int_weights {
  int32_t pairs[FC_SPLITKV_CHUNK][FC_SPLITKV_KEY_BLOCK / 2];
  float step[FC_SPLITKV_CHUNK], offset[FC_SPLITKV_CHUNK];
} fc_splitkv_int_weights;

/* Runs CALL(dtype, dim) with both as constants where they are the common
 * ones (I8 or U8; 128 or 64), so that each gets its own unrolled copy: the
 * integer micro-kernels' dispatch. */
#define FC_SPLITKV_BY_INT_DIM(dtype, dim, CALL)                                \
  do {                                                                         \
    if ((dim) == 128)                                                          \
      CALL(dtype, 128);                                                        \
    else if ((dim) == 64)                                                      \
      CALL(dtype, 64);                                                         \
    else                                                                       \
      CALL(dtype, (dim));                                                      \
  } while (0)
#define FC_SPLITKV_BY_INT_DTYPE(dtype, dim, CALL)                              \
  do {                                                                         \
    if ((dtype) == FLASHCPU_DTYPE_U8)                                          \
      FC_SPLITKV_BY_INT_DIM(FLASHCPU_DTYPE_U8, dim, CALL);                     \
    else                                                                       \
      FC_SPLITKV_BY_INT_DIM(FLASHCPU_DTYPE_I8, dim, CALL);                     \
  } while (0)

/* The integer values of AVX512-VNNI (splitkv_values_avx512vnni.c). */
bool fc_splitkv_values_i16dot__avx512vnni(
    const struct fc_splitkv_rows *v, flashcpu_dtype v_dtype, int64_t dv,
    int64_t padded_dv, int64_t n, float *o, const float *weights,
    const float *alpha, const unsigned *seen, struct fc_prefetch_sweep *sweep);

/* The byte values of AVX512-VNNI (splitkv_values_i8dot_avx512vnni.c):
 * as fc_splitkv_int_values_fn, the weights rounded to 8 bits (0..255)
 * against each slot's largest in the block instead of to int16. */
bool fc_splitkv_values_i8dot__avx512vnni(
    const struct fc_splitkv_rows *v, flashcpu_dtype v_dtype, int64_t dv,
    int64_t padded_dv, int64_t n, float *o, const float *weights,
    const float *alpha, const unsigned *seen, struct fc_prefetch_sweep *sweep);

/* The integer dot-product kernels: int_scores where K is I8 or U8 read in
 * place and the chunk's q rounds to integers (|code| <= q_limit: 16383,
 * int16 codes, or 127, int8 codes); int_values (may be NULL) for those
 * chunks where V is I8 or U8 read in place too. Everything else as the
 * ISA's f32 kernel. */
flashcpu_status fc_splitkv_plan_avx512_int(const fc_kernel_env *env,
                                           const fc_problem *p,
                                           fc_kernel_plan *plan,
                                           fc_splitkv_int_scores_fn int_scores,
                                           fc_splitkv_int_values_fn int_values,
                                           int q_limit);
flashcpu_status fc_splitkv_plan_avx2_int(const fc_kernel_env *env,
                                         const fc_problem *p,
                                         fc_kernel_plan *plan,
                                         fc_splitkv_int_scores_fn int_scores,
                                         fc_splitkv_int_values_fn int_values);

#endif
