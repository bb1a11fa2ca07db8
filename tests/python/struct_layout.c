/* Prints the layout of every public struct of flashcpu.h as the C compiler
 * sees it, for tests/python/test_struct_layout.py, which checks the Python
 * package's ctypes mirrors against it (and this list against the header):
 *   STRUCT size SIZE
 *   STRUCT.FIELD OFFSET SIZE          one line per field, in order */
#include <stddef.h>
#include <stdio.h>

#include "flashcpu/flashcpu.h"

#define STRUCTS(S, F)                                                          \
  S(flashcpu_host_openmp)                                                      \
  F(flashcpu_host_openmp, parallel)                                            \
  F(flashcpu_host_openmp, thread_num)                                          \
  F(flashcpu_host_openmp, num_threads)                                         \
  S(flashcpu_context_options)                                                  \
  F(flashcpu_context_options, struct_size)                                     \
  F(flashcpu_context_options, num_threads)                                     \
  F(flashcpu_context_options, team_level)                                      \
  F(flashcpu_context_options, max_team_size)                                   \
  F(flashcpu_context_options, max_isa)                                         \
  F(flashcpu_context_options, tune_file)                                       \
  F(flashcpu_context_options, settings)                                        \
  F(flashcpu_context_options, host_openmp)                                     \
  S(flashcpu_kernel_info)                                                      \
  F(flashcpu_kernel_info, struct_size)                                         \
  F(flashcpu_kernel_info, name)                                                \
  F(flashcpu_kernel_info, family)                                              \
  F(flashcpu_kernel_info, isa)                                                 \
  F(flashcpu_kernel_info, runnable)                                            \
  F(flashcpu_kernel_info, weights_dtype)                                       \
  F(flashcpu_kernel_info, forced_only)                                         \
  S(flashcpu_tensor)                                                           \
  F(flashcpu_tensor, data)                                                     \
  F(flashcpu_tensor, dtype)                                                    \
  F(flashcpu_tensor, dims)                                                     \
  F(flashcpu_tensor, strides)                                                  \
  S(flashcpu_kv_scales)                                                        \
  F(flashcpu_kv_scales, data)                                                  \
  F(flashcpu_kv_scales, dtype)                                                 \
  F(flashcpu_kv_scales, strides)                                               \
  F(flashcpu_kv_scales, zero_points)                                           \
  S(flashcpu_tree_mask)                                                        \
  F(flashcpu_tree_mask, bits)                                                  \
  F(flashcpu_tree_mask, num_rows)                                              \
  F(flashcpu_tree_mask, num_keys)                                              \
  F(flashcpu_tree_mask, row_stride)                                            \
  F(flashcpu_tree_mask, batch_stride)                                          \
  S(flashcpu_additive_mask)                                                    \
  F(flashcpu_additive_mask, data)                                              \
  F(flashcpu_additive_mask, strides)                                           \
  S(flashcpu_attention_params)                                                 \
  F(flashcpu_attention_params, struct_size)                                    \
  F(flashcpu_attention_params, scale)                                          \
  F(flashcpu_attention_params, flags)                                          \
  F(flashcpu_attention_params, window_left)                                    \
  F(flashcpu_attention_params, window_right)                                   \
  F(flashcpu_attention_params, softcap)                                        \
  F(flashcpu_attention_params, tree_mask)                                      \
  F(flashcpu_attention_params, additive_mask)                                  \
  F(flashcpu_attention_params, kv_lengths)                                     \
  F(flashcpu_attention_params, sinks)                                          \
  F(flashcpu_attention_params, sinks_dtype)                                    \
  F(flashcpu_attention_params, alibi_slopes)                                   \
  F(flashcpu_attention_params, alibi_batch_stride)                             \
  F(flashcpu_attention_params, k_scales)                                       \
  F(flashcpu_attention_params, v_scales)                                       \
  F(flashcpu_attention_params, query_offsets)                                  \
  S(flashcpu_paged_kv)                                                         \
  F(flashcpu_paged_kv, struct_size)                                            \
  F(flashcpu_paged_kv, k)                                                      \
  F(flashcpu_paged_kv, v)                                                      \
  F(flashcpu_paged_kv, k_dtype)                                                \
  F(flashcpu_paged_kv, v_dtype)                                                \
  F(flashcpu_paged_kv, num_pages)                                              \
  F(flashcpu_paged_kv, page_size)                                              \
  F(flashcpu_paged_kv, kv_heads)                                               \
  F(flashcpu_paged_kv, head_dim)                                               \
  F(flashcpu_paged_kv, v_head_dim)                                             \
  F(flashcpu_paged_kv, k_strides)                                              \
  F(flashcpu_paged_kv, v_strides)                                              \
  F(flashcpu_paged_kv, k_scales)                                               \
  F(flashcpu_paged_kv, v_scales)                                               \
  S(flashcpu_batch)                                                            \
  F(flashcpu_batch, struct_size)                                               \
  F(flashcpu_batch, num_requests)                                              \
  F(flashcpu_batch, cu_seqlens_q)                                              \
  F(flashcpu_batch, seq_lens_kv)                                               \
  F(flashcpu_batch, block_table)                                               \
  F(flashcpu_batch, block_table_stride)                                        \
  F(flashcpu_batch, block_offsets)                                             \
  F(flashcpu_batch, tree_mask)                                                 \
  F(flashcpu_batch, tree_num_keys)

#define PRINT_STRUCT(type) printf(#type " size %zu\n", sizeof(type));
#define PRINT_FIELD(type, field)                                               \
  printf(#type "." #field " %zu %zu\n", offsetof(type, field),                 \
         sizeof(((type *)0)->field));

int main(void) {
  STRUCTS(PRINT_STRUCT, PRINT_FIELD)
  return 0;
}
