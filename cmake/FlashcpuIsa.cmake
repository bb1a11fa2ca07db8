# Per-ISA compile flags for translation units that hold ISA-specific code.
#
# The rest of a target is built for the baseline ISA, so one binary runs
# everywhere; only the files named here may use AVX2 / AVX-512 instructions,
# and the caller must check the CPU (and OS) at run time before calling into
# them.
#
#   flashcpu_isa_flags(ISA <avx2|avx512|avx512bf16> SOURCES <files...>)
#
# Appends the ISA's flags to each source's COMPILE_OPTIONS (a source-file
# property, so it must be called from the directory whose target lists the
# files). x86-64 only:
#   avx2       -mavx2 -mfma -mf16c
#   avx512     -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
#   avx512bf16 the avx512 flags + -mavx512bf16
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

include_guard(GLOBAL)

set(FLASHCPU_ISA_FLAGS_avx2 -mavx2 -mfma -mf16c)
set(FLASHCPU_ISA_FLAGS_avx512
    -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c)
set(FLASHCPU_ISA_FLAGS_avx512bf16 ${FLASHCPU_ISA_FLAGS_avx512} -mavx512bf16)

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
  if(NOT DEFINED FLASHCPU_ISA_FLAGS_${isa})
    message(FATAL_ERROR "flashcpu_isa_supported: unknown ISA '${isa}' "
                        "(expected avx2, avx512 or avx512bf16)")
  endif()
  flashcpu_target_is_x86_64(is_x86_64)
  set(${out_var} ${is_x86_64} PARENT_SCOPE)
endfunction()

function(flashcpu_isa_flags)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "ISA" "SOURCES")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
            "flashcpu_isa_flags: unexpected arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_ISA OR NOT DEFINED FLASHCPU_ISA_FLAGS_${ARG_ISA})
    message(FATAL_ERROR "flashcpu_isa_flags: ISA must be avx2, avx512 or "
                        "avx512bf16 (got '${ARG_ISA}')")
  endif()
  flashcpu_target_is_x86_64(is_x86_64)
  if(NOT is_x86_64)
    return()
  endif()
  set_property(SOURCE ${ARG_SOURCES} APPEND PROPERTY
               COMPILE_OPTIONS ${FLASHCPU_ISA_FLAGS_${ARG_ISA}})
endfunction()
