/* FLASHCPU_GGML_PROFILE: where the backend's time goes, by call shape, so
 * that a benchmark can tell the attention share of a step. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <time.h>

#include "ggml/ggml_backend_flashcpu.h"

double fcg_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

void fcg_profile_add(fcg_profile *profile, int64_t rows, int64_t keys,
                     int mask_kind, double seconds) {
  const int64_t padded = (keys + 255) / 256 * 256;
  int i = 0;
  while (i < profile->used && (profile->buckets[i].rows != rows ||
                               profile->buckets[i].keys != padded ||
                               profile->buckets[i].mask_kind != mask_kind))
    i++;
  if (i == FCG_PROFILE_BUCKETS) i--; /* the last bucket takes the overflow */
  if (i == profile->used) {
    profile->used++;
    profile->buckets[i].rows = rows;
    profile->buckets[i].keys = padded;
    profile->buckets[i].mask_kind = mask_kind;
  }
  profile->buckets[i].calls++;
  profile->buckets[i].seconds += seconds;
}

void fcg_profile_print(const fcg_profile *profile) {
  static const char *const mask_names[] = {"none", "prefix", "causal", "copy"};
  for (int i = 0; i < profile->used; i++)
    fprintf(stderr,
            "flashcpu ggml profile: rows %lld keys<=%lld calls %lld "
            "mean_us %.1f mask %s\n",
            (long long)profile->buckets[i].rows,
            (long long)profile->buckets[i].keys,
            (long long)profile->buckets[i].calls,
            1e6 * profile->buckets[i].seconds /
                (double)profile->buckets[i].calls,
            mask_names[profile->buckets[i].mask_kind & 3]);
}
