# One install test, run by ctest as `cmake -D... -P install_test.cmake`
# (tests/install/CMakeLists.txt passes the variables). STEP is one of:
#   install       cmake --install BINARY_DIR into PREFIX (a fresh copy)
#   find_package  configure, build and run consumer/ with find_package
#                 (LINK shared|static, LANGUAGE C|CXX)
#   pkgconfig     compile consumer/consumer.c with pkg-config's flags
#                 (LINK shared, or static: --static and libflashcpu.a)
#   readme        compile and run the C block of README.md that sits between
#                 <!-- api-example:begin --> and <!-- api-example:end -->
#   example       compile and run SOURCE (a program of examples/)
#   cli           run the installed tool: PREFIX/bin/flashcpu info
# Any failure ends with FATAL_ERROR saying which command failed and its output.
cmake_minimum_required(VERSION 3.18)

function(fail)
  string(JOIN "" text ${ARGN})
  message(FATAL_ERROR "install test '${STEP}' FAILED: ${text}")
endfunction()

# Runs a command; on failure prints it with its output and fails the test.
function(run_checked what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    fail("${what}\n  command: ${command}\n  result: ${rc}\n${output}")
  endif()
  set(run_output "${output}" PARENT_SCOPE)
endfunction()

# Checks whether the executable needs libflashcpu.so: it must for shared
# linking, and must not for the static archive.
function(check_linkage exe link)
  if(NOT READELF OR NOT EXISTS "${READELF}")
    message(STATUS "no readelf: not checking how ${exe} links flashcpu")
    return()
  endif()
  run_checked("reading the dynamic section of ${exe}" ${READELF} -d ${exe})
  string(FIND "${run_output}" "libflashcpu.so" at)
  if(link STREQUAL "shared" AND at EQUAL -1)
    fail("${exe} does not need libflashcpu.so; it should link the shared "
         "library:\n${run_output}")
  elseif(link STREQUAL "static" AND NOT at EQUAL -1)
    fail("${exe} needs libflashcpu.so; it should link libflashcpu.a:\n"
         "${run_output}")
  endif()
endfunction()

function(run_consumer exe)
  run_checked("running ${exe}" ${exe})
  message("${run_output}")
endfunction()

# pkg-config ARGN flashcpu, with PREFIX's .pc file first, as a list in out_var.
function(pkg_config_flags out_var)
  if(NOT PKG_CONFIG OR NOT EXISTS "${PKG_CONFIG}")
    fail("pkg-config not found (Debian: apt-get install pkg-config)")
  endif()
  run_checked("pkg-config ${ARGN} flashcpu"
    ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${PREFIX}/${LIBDIR}/pkgconfig"
    ${PKG_CONFIG} ${ARGN} flashcpu)
  string(STRIP "${run_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out_var} "${flags}" PARENT_SCOPE)
endfunction()

# Compiles one C file against the installed package with pkg-config.
function(compile_with_pkg_config source exe link)
  pkg_config_flags(prefix_seen --variable=prefix)
  get_filename_component(prefix_real "${PREFIX}" REALPATH)
  if(prefix_seen)
    get_filename_component(prefix_seen "${prefix_seen}" REALPATH)
  endif()
  if(NOT prefix_seen STREQUAL prefix_real)
    fail("flashcpu.pc says prefix=${prefix_seen}, but it was installed to "
         "${PREFIX}: the .pc file must name the prefix installed to")
  endif()
  pkg_config_flags(cflags --cflags)
  if(link STREQUAL "static")
    pkg_config_flags(libs --static --libs)
    # -lflashcpu would pick libflashcpu.so; name the archive itself.
    list(TRANSFORM libs REPLACE "^-lflashcpu$" "${PREFIX}/${LIBDIR}/libflashcpu.a")
  else()
    pkg_config_flags(libs --libs)
    list(APPEND libs "-Wl,-rpath,${PREFIX}/${LIBDIR}")
  endif()
  separate_arguments(c_flags UNIX_COMMAND "${C_FLAGS}")
  separate_arguments(linker_flags UNIX_COMMAND "${EXE_LINKER_FLAGS}")
  run_checked("compiling ${source} with pkg-config's flags"
    ${C_COMPILER} ${c_flags} -std=c99 -Wall -Wextra -Wpedantic -Werror
    ${cflags} ${source} -o ${exe} ${linker_flags} ${libs} -lm)
endfunction()

foreach(var STEP BINARY_DIR PREFIX LIBDIR WORK_DIR C_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: ${var} is not set")
  endif()
endforeach()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  set(config_args)
  if(CONFIG)
    set(config_args --config ${CONFIG})
  endif()
  run_checked("cmake --install ${BINARY_DIR} --prefix ${PREFIX}"
    ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${PREFIX} ${config_args})
  foreach(file include/flashcpu/flashcpu.h
               ${LIBDIR}/libflashcpu.so ${LIBDIR}/libflashcpu.a
               ${LIBDIR}/cmake/flashcpu/flashcpuConfig.cmake
               ${LIBDIR}/cmake/flashcpu/flashcpuConfigVersion.cmake
               ${LIBDIR}/cmake/flashcpu/flashcpuTargets.cmake
               ${LIBDIR}/pkgconfig/flashcpu.pc)
    if(NOT EXISTS "${PREFIX}/${file}")
      fail("cmake --install did not install ${file} into ${PREFIX}")
    endif()
  endforeach()
  message("installed into ${PREFIX}")

elseif(STEP STREQUAL "find_package")
  file(REMOVE_RECURSE "${WORK_DIR}")
  set(configure_args
    -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR} -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${PREFIX}
    -DFLASHCPU_EXPECTED_PREFIX=${PREFIX}
    -DFLASHCPU_REQUIRED_VERSION=${VERSION}
    -DFLASHCPU_LINK=${LINK}
    -DCONSUMER_LANGUAGE=${LANGUAGE}
    "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
  if(LANGUAGE STREQUAL "CXX")
    list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
                               "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
  else()
    list(APPEND configure_args -DCMAKE_C_COMPILER=${C_COMPILER}
                               "-DCMAKE_C_FLAGS=${C_FLAGS}")
  endif()
  if(CONFIG)
    list(APPEND configure_args -DCMAKE_BUILD_TYPE=${CONFIG})
  endif()
  run_checked("configuring the find_package consumer (${LANGUAGE}, ${LINK})"
    ${CMAKE_COMMAND} ${configure_args})
  run_checked("building the find_package consumer (${LANGUAGE}, ${LINK})"
    ${CMAKE_COMMAND} --build ${WORK_DIR})
  check_linkage(${WORK_DIR}/consumer ${LINK})
  run_consumer(${WORK_DIR}/consumer)

elseif(STEP STREQUAL "pkgconfig")
  file(REMOVE_RECURSE "${WORK_DIR}")
  file(MAKE_DIRECTORY "${WORK_DIR}")
  compile_with_pkg_config(${CONSUMER_SOURCE_DIR}/consumer.c
                          ${WORK_DIR}/consumer ${LINK})
  check_linkage(${WORK_DIR}/consumer ${LINK})
  run_consumer(${WORK_DIR}/consumer)

elseif(STEP STREQUAL "readme")
  if(NOT EXISTS "${README}")
    fail("${README} does not exist")
  endif()
  file(READ "${README}" readme)
  set(begin_marker "<!-- api-example:begin -->")
  set(end_marker "<!-- api-example:end -->")
  string(FIND "${readme}" "${begin_marker}" begin)
  string(FIND "${readme}" "${end_marker}" end)
  if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
    fail("${README} has no '${begin_marker}' ... '${end_marker}' section")
  endif()
  string(LENGTH "${begin_marker}" begin_length)
  math(EXPR begin "${begin} + ${begin_length}")
  math(EXPR length "${end} - ${begin}")
  string(SUBSTRING "${readme}" ${begin} ${length} section)
  # The section holds one fenced block: ```c ... ```.
  string(FIND "${section}" "```c\n" fence_open)
  if(fence_open EQUAL -1)
    fail("the api-example section of ${README} has no ```c code block")
  endif()
  math(EXPR code_begin "${fence_open} + 5")
  string(SUBSTRING "${section}" ${code_begin} -1 code)
  string(FIND "${code}" "```" fence_close)
  if(fence_close EQUAL -1)
    fail("the ```c block of the api-example section of ${README} is not closed")
  endif()
  string(SUBSTRING "${code}" 0 ${fence_close} code)
  file(REMOVE_RECURSE "${WORK_DIR}")
  file(MAKE_DIRECTORY "${WORK_DIR}")
  file(WRITE "${WORK_DIR}/readme_example.c" "${code}")
  compile_with_pkg_config(${WORK_DIR}/readme_example.c
                          ${WORK_DIR}/readme_example shared)
  run_consumer(${WORK_DIR}/readme_example)

elseif(STEP STREQUAL "example")
  file(REMOVE_RECURSE "${WORK_DIR}")
  file(MAKE_DIRECTORY "${WORK_DIR}")
  get_filename_component(name "${SOURCE}" NAME_WE)
  compile_with_pkg_config(${SOURCE} ${WORK_DIR}/${name} shared)
  run_consumer(${WORK_DIR}/${name})

elseif(STEP STREQUAL "cli")
  set(tool "${PREFIX}/${BINDIR}/flashcpu")
  if(NOT EXISTS "${tool}")
    fail("cmake --install did not install the flashcpu tool (${tool})")
  endif()
  run_checked("running the installed tool: ${tool} info" ${tool} info)
  message("${run_output}")

else()
  message(FATAL_ERROR "install_test.cmake: unknown STEP '${STEP}'")
endif()
