/* The mask side of ggml_mapping.h: the f32 copy of a ggml f16 mask. */
#ifndef FLASHCPU_GGML_MASK_H
#define FLASHCPU_GGML_MASK_H

#include "ggml/ggml_mapping.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the additive mask of q heads [head_begin, head_begin + heads) to
 * copy ([B or 1, heads or 1, L, S] floats: a plane per head only where
 * ALiBi or the mask's planes make heads differ, per batch only where the
 * mask has batch planes) and returns its view. */
flashcpu_additive_mask fcg_copy_mask(const fcg_flash_attn *op,
                                     int64_t head_begin, int64_t heads,
                                     float *copy);

#ifdef __cplusplus
}
#endif

#endif
