# Per-ISA compile flags for translation units that hold ISA-specific code.
#
# The rest of a target is built for the baseline ISA, so one binary runs
# everywhere; only the files named here may use AVX2 / AVX-512 instructions,
# and the caller must check the CPU (and OS) at run time before calling into
# them.
#
#   flashcpu_isa_flags(ISA <avx2|avx512|avx512bf16|...> SOURCES <files...>)
#
# Appends the ISA's flags to each source's COMPILE_OPTIONS (a source-file
# property, so it must be called from the directory whose target lists the
# files). x86-64 only:
#   avx2       -mavx2 -mfma -mf16c
#   avx512     -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
#   avx512bf16 the avx512 flags + -mavx512bf16
#   avx512vnni the avx512 flags + -mavx512vnni
#   amxbf16    the avx512bf16 flags + -mamx-tile -mamx-bf16
#   amxint8    the avx512vnni flags + -mamx-tile -mamx-int8
#
# flashcpu_isa_supported(<ISA> <out-var>) sets <out-var> to TRUE when the
# target processor can take that ISA's files, so callers can leave them out:
#
#   flashcpu_isa_supported(avx512 have_avx512)
#   if(have_avx512)
#     target_sources(mytarget PRIVATE kernel_avx512.c)
#     flashcpu_isa_flags(ISA avx512 SOURCES kernel_avx512.c)
#   endif()
#
# On other targets (aarch64, ...) flashcpu_isa_flags does nothing.
#
# flashcpu_isa_available(<ISA> <out-var>): TRUE when the target processor
# takes the ISA (neon: aarch64; the others: x86-64) and this C compiler
# accepts its flags (check_c_compiler_flag), so that a compiler without, say,
# AVX512-BF16 support still builds everything else.
# Also: flashcpu_target_is_x86_64(<out-var>) and
# flashcpu_isa_compile_flags(<ISA> <out-var>) (the flag list itself).

include_guard(GLOBAL)
include(CheckCSourceCompiles)

# The flags of one ISA, or FATAL_ERROR for an unknown name. A function, not
# variables, because include_guard(GLOBAL) would hide variables from every
# directory but the first that includes this file.
function(flashcpu_isa_compile_flags isa out_var)
  set(avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c)
  if(isa STREQUAL "avx2")
    set(flags -mavx2 -mfma -mf16c)
  elseif(isa STREQUAL "avx512")
    set(flags ${avx512})
  elseif(isa STREQUAL "avx512bf16")
    set(flags ${avx512} -mavx512bf16)
  elseif(isa STREQUAL "avx512vnni")
    set(flags ${avx512} -mavx512vnni)
  elseif(isa STREQUAL "amxbf16")
    set(flags ${avx512} -mavx512bf16 -mamx-tile -mamx-bf16)
  elseif(isa STREQUAL "amxint8")
    set(flags ${avx512} -mavx512vnni -mamx-tile -mamx-int8)
  elseif(isa STREQUAL "neon")
    set(flags "") # the aarch64 baseline
  else()
    message(FATAL_ERROR "flashcpu: unknown ISA '${isa}' "
                        "(expected avx2, avx512, avx512bf16, avx512vnni, amxbf16, amxint8 or neon)")
  endif()
  set(${out_var} ${flags} PARENT_SCOPE)
endfunction()

# TRUE when CMAKE_SYSTEM_PROCESSOR names an x86-64 target (the processor
# being built for, which differs from the host's when cross-compiling).
function(flashcpu_target_is_x86_64 out_var)
  string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" processor)
  if(processor MATCHES "^(x86_64|amd64|x64)$")
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    set(${out_var} FALSE PARENT_SCOPE)
  endif()
endfunction()

function(flashcpu_isa_supported isa out_var)
  flashcpu_isa_compile_flags(${isa} unused) # validates the name
  flashcpu_target_is_x86_64(is_x86_64)
  set(${out_var} ${is_x86_64} PARENT_SCOPE)
endfunction()

function(flashcpu_isa_flags)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "ISA" "SOURCES")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
            "flashcpu_isa_flags: unexpected arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  flashcpu_isa_compile_flags("${ARG_ISA}" flags)
  flashcpu_target_is_x86_64(is_x86_64)
  if(NOT is_x86_64)
    return()
  endif()
  set_property(SOURCE ${ARG_SOURCES} APPEND PROPERTY
               COMPILE_OPTIONS ${flags})
endfunction()

function(flashcpu_isa_available isa out_var)
  flashcpu_isa_compile_flags(${isa} flags)
  string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" processor)
  if(isa STREQUAL "neon")
    if(processor MATCHES "^(aarch64|arm64)$")
      set(${out_var} TRUE PARENT_SCOPE)
    else()
      set(${out_var} FALSE PARENT_SCOPE)
    endif()
    return()
  endif()
  flashcpu_target_is_x86_64(is_x86_64)
  if(NOT is_x86_64)
    set(${out_var} FALSE PARENT_SCOPE)
    return()
  endif()
  # The flags and one intrinsic of the ISA: a compiler that takes the flag
  # but lacks the intrinsics' header support fails here too.
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${flags}")
  set(probe_avx2 "__m256 x = _mm256_fmadd_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(2.0f), _mm256_setzero_ps()); return (int)_mm256_cvtss_f32(x);")
  set(probe_avx512 "__m512 x = _mm512_set1_ps(1.0f); return (int)_mm512_reduce_add_ps(x);")
  set(probe_avx512bf16 "__m512bh a = (__m512bh)_mm512_setzero_si512(); __m512 x = _mm512_dpbf16_ps(_mm512_setzero_ps(), a, a); return (int)_mm512_reduce_add_ps(x);")
  set(probe_avx512vnni "__m512i x = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_set1_epi16(1), _mm512_set1_epi16(2)); return _mm512_reduce_add_epi32(x);")
  set(probe_amxbf16 "_tile_zero(0); _tile_dpbf16ps(0, 1, 2); _tile_release(); return 0;")
  set(probe_amxint8 "_tile_zero(0); _tile_dpbssd(0, 1, 2); _tile_release(); return 0;")
  string(MAKE_C_IDENTIFIER "FLASHCPU_CC_HAS_${isa}" result_var)
  set(CMAKE_REQUIRED_QUIET ON)
  check_c_source_compiles("#include <immintrin.h>
int main(void) { ${probe_${isa}} }" ${result_var})
  set(${out_var} ${${result_var}} PARENT_SCOPE)
endfunction()
