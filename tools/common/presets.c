/* The model presets of docs/performance.md. Windows are (window - 1) keys
 * to the left plus the current one, so "sliding window 4096" sees 4096 keys. */
#include "common/presets.h"

#include <string.h>

static const toolkit_preset presets[] = {
    {"llama3-8b", 32, 8, 128, true, -1, 0.0f, "GQA 4"},
    {"llama3-70b", 64, 8, 128, true, -1, 0.0f, "GQA 8"},
    {"qwen2.5-7b", 28, 4, 128, true, -1, 0.0f, "GQA 7"},
    {"qwen2-0.5b", 14, 2, 64, true, -1, 0.0f, "small heads"},
    {"mistral-7b", 32, 8, 128, true, 4095, 0.0f, "sliding window 4096"},
    {"gemma2-9b", 16, 8, 256, true, 4095, 50.0f, "softcap 50, window 4096"},
    {"gemma3-1b", 4, 1, 256, true, -1, 0.0f, "MQA, head_dim 256"},
    {"phi3-mini", 32, 32, 96, true, -1, 0.0f, "MHA, head_dim 96"},
    {"bert-base", 12, 12, 64, false, -1, 0.0f, "encoder, not causal"},
};

const toolkit_preset *toolkit_presets(int *count) {
  *count = (int)(sizeof presets / sizeof presets[0]);
  return presets;
}

const toolkit_preset *toolkit_preset_find(const char *name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) return &presets[i];
  return NULL;
}
