/* CPU feature detection: cpuid + xgetbv on x86-64, hwcaps on aarch64. */
/* syscall() is a GNU/POSIX extension outside strict C17. */
#define _GNU_SOURCE
#include "dispatch/cpu_features.h"

#include "flashcpu/flashcpu.h"

#include <stdio.h>
#include <string.h>
#include <threads.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

static fc_cpu_features detected;
static once_flag detect_once = ONCE_FLAG_INIT;

#if defined(__x86_64__)
/* XCR0 bits: which register state the OS saves on context switches. */
enum {
  XCR0_SSE_AVX = (1u << 1) | (1u << 2),
  XCR0_AVX512 = (1u << 5) | (1u << 6) | (1u << 7), /* opmask, ZMM hi/16 */
  XCR0_AMX = (1u << 17) | (1u << 18)               /* tile config, data */
};

static unsigned long long read_xcr0(void) {
  unsigned int eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}

/* Linux keeps AMX tile data off until a process asks (arch_prctl). */
static bool request_amx_permission(void) {
#if defined(__linux__)
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
  return false;
#endif
}

static void detect(void) {
  unsigned int eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[12];
    memcpy(vendor, &ebx, 4);
    memcpy(vendor + 4, &edx, 4);
    memcpy(vendor + 8, &ecx, 4);
    detected.vendor_amd = memcmp(vendor, "AuthenticAMD", 12) == 0;
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return;
  bool osxsave = ecx & (1u << 27), avx = ecx & (1u << 28);
  bool fma = ecx & (1u << 12), f16c = ecx & (1u << 29);
  if (!osxsave || !avx) return;
  unsigned long long xcr0 = read_xcr0();
  if ((xcr0 & XCR0_SSE_AVX) != XCR0_SSE_AVX) return;
  unsigned int max_leaf = __get_cpuid_max(0, NULL);
  if (max_leaf < 7) return;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  unsigned int leaf7_ebx = ebx, leaf7_ecx = ecx, leaf7_edx = edx;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  unsigned int leaf7_1_eax = eax;

  detected.fma = fma;
  detected.f16c = f16c;
  detected.avx2 = (leaf7_ebx & (1u << 5)) != 0;
  if ((xcr0 & XCR0_AVX512) == XCR0_AVX512) {
    detected.avx512f = leaf7_ebx & (1u << 16);
    detected.avx512dq = leaf7_ebx & (1u << 17);
    detected.avx512bw = leaf7_ebx & (1u << 30);
    detected.avx512vl = leaf7_ebx & (1u << 31);
    detected.avx512_bf16 = detected.avx512f && (leaf7_1_eax & (1u << 5));
    detected.avx512_fp16 = detected.avx512f && (leaf7_edx & (1u << 23));
    detected.avx512_vnni = detected.avx512f && (leaf7_ecx & (1u << 11));
    detected.avx512_vbmi = detected.avx512f && (leaf7_ecx & (1u << 1));
  }
  bool amx_tile = leaf7_edx & (1u << 24), amx_bf16 = leaf7_edx & (1u << 22);
  bool amx_int8 = leaf7_edx & (1u << 25);
  bool tile_state = amx_tile && (xcr0 & XCR0_AMX) == XCR0_AMX;
  detected.amx_bf16 = tile_state && amx_bf16;
  detected.amx_int8 = tile_state && amx_int8;
  if (detected.amx_bf16 || detected.amx_int8)
    detected.amx_permitted = request_amx_permission();
}
#elif defined(__aarch64__)
static void detect(void) {
  unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  detected.neon = true; /* ASIMD is mandatory on AArch64 */
  detected.arm_fp16 = (hwcap & (1ul << 10)) != 0;  /* HWCAP_ASIMDHP */
  detected.sve = (hwcap & (1ul << 22)) != 0;       /* HWCAP_SVE */
  detected.arm_bf16 = (hwcap2 & (1ul << 14)) != 0; /* HWCAP2_BF16 */
}
#else
static void detect(void) {}
#endif

const fc_cpu_features *fc_cpu_features_get(void) {
  call_once(&detect_once, detect);
  return &detected;
}

size_t fc_cpu_features_describe(const fc_cpu_features *f, char *buffer,
                                size_t size) {
  const struct {
    bool present;
    const char *name;
  } list[] = {
      {f->avx2, "avx2"},
      {f->fma, "fma"},
      {f->f16c, "f16c"},
      {f->avx512f, "avx512f"},
      {f->avx512bw, "avx512bw"},
      {f->avx512vl, "avx512vl"},
      {f->avx512dq, "avx512dq"},
      {f->avx512_bf16, "avx512_bf16"},
      {f->avx512_fp16, "avx512_fp16"},
      {f->avx512_vnni, "avx512_vnni"},
      {f->avx512_vbmi, "avx512_vbmi"},
      {f->amx_bf16, "amx_bf16"},
      {f->amx_int8, "amx_int8"},
      {f->amx_permitted, "amx_permitted"},
      {f->neon, "neon"},
      {f->sve, "sve"},
      {f->arm_bf16, "bf16"},
      {f->arm_fp16, "fp16"},
  };
  size_t needed = 0;
  if (buffer && size) buffer[0] = '\0';
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
    if (!list[i].present) continue;
    size_t room = buffer && needed < size ? size - needed : 0;
    int n = snprintf(room ? buffer + needed : NULL, room, "%s%s",
                     needed ? " " : "", list[i].name);
    if (n > 0) needed += (size_t)n;
  }
  return needed;
}

size_t flashcpu_cpu_features(char *buffer, size_t size) {
  return fc_cpu_features_describe(fc_cpu_features_get(), buffer, size);
}
