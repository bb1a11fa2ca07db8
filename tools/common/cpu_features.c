/* ISA feature detection for reports: cpuid plus XCR0 on x86 (the OS must
 * save the vector state, or the registers are unusable), hwcaps on
 * aarch64. */
#include "common/cpu_info.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static void append_feature(char *buffer, size_t size, const char *name) {
  size_t used = strlen(buffer);
  if (used + strlen(name) + 2 > size) return;
  snprintf(buffer + used, size - used, "%s%s", used ? " " : "", name);
}

#if defined(__x86_64__) || defined(__i386__)
static uint64_t read_xcr0(void) {
  uint32_t low, high;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return ((uint64_t)high << 32) | low;
}

static void list_features(char *buffer, size_t size) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  const bool osxsave = c & (1u << 27);
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;            /* SSE + AVX state */
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0; /* k0-7, zmm */
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;    /* XTILECFG, XTILEDATA */
  const bool avx = os_avx && (c & (1u << 28));
  const bool fma = avx && (c & (1u << 12));
  const bool f16c = avx && (c & (1u << 29));
  unsigned b7 = 0, c7 = 0, d7 = 0, a7_1 = 0, unused;
  if (__get_cpuid_count(7, 0, &unused, &b7, &c7, &d7))
    __get_cpuid_count(7, 1, &a7_1, &unused, &unused, &unused);
  const bool avx512f = os_avx512 && (b7 & (1u << 16));
  if (avx && (b7 & (1u << 5))) append_feature(buffer, size, "avx2");
  if (fma) append_feature(buffer, size, "fma");
  if (f16c) append_feature(buffer, size, "f16c");
  if (avx512f) append_feature(buffer, size, "avx512f");
  if (avx512f && (b7 & (1u << 30))) append_feature(buffer, size, "avx512bw");
  if (avx512f && (b7 & (1u << 31))) append_feature(buffer, size, "avx512vl");
  if (avx512f && (b7 & (1u << 17))) append_feature(buffer, size, "avx512dq");
  if (avx512f && (a7_1 & (1u << 5)))
    append_feature(buffer, size, "avx512_bf16");
  if (avx512f && (d7 & (1u << 23)))
    append_feature(buffer, size, "avx512_fp16");
  if (os_amx && (d7 & (1u << 22))) append_feature(buffer, size, "amx_bf16");
}
#elif defined(__aarch64__) && defined(__linux__)
/* Bit values from the kernel's asm/hwcap.h, in case libc headers lack them. */
static void list_features(char *buffer, size_t size) {
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  if (hwcap & (1ul << 1)) append_feature(buffer, size, "neon");  /* ASIMD */
  if (hwcap & (1ul << 10)) append_feature(buffer, size, "fp16"); /* ASIMDHP */
  if (hwcap2 & (1ul << 14)) append_feature(buffer, size, "bf16");
  if (hwcap & (1ul << 22)) append_feature(buffer, size, "sve");
}
#else
static void list_features(char *buffer, size_t size) {
  (void)buffer;
  (void)size;
}
#endif

void toolkit_cpu_features(char *buffer, size_t size) {
  if (size == 0) return;
  buffer[0] = '\0';
  list_features(buffer, size);
  if (buffer[0] == '\0') snprintf(buffer, size, "none");
}
