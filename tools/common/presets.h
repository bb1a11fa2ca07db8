/* Model-shaped attention presets: the shapes of docs/performance.md that every
 * benchmark and `flashcpu run` are measured on. */
#ifndef FLASHCPU_TOOLS_PRESETS_H
#define FLASHCPU_TOOLS_PRESETS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct toolkit_preset {
  const char *name;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t head_dim;
  bool causal;    /* decoders: causal; encoders (bert): not */
  int64_t window; /* sliding window left extent; -1: none */
  float softcap;  /* 0: none */
  const char *notes;
} toolkit_preset;

/* Every preset, in the order of docs/performance.md's table. */
const toolkit_preset *toolkit_presets(int *count);

/* The preset called name, or NULL. */
const toolkit_preset *toolkit_preset_find(const char *name);

#ifdef __cplusplus
}
#endif

#endif
