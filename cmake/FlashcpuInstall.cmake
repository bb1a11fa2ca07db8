# Installs the header, both libraries, a CMake package (flashcpu::flashcpu,
# flashcpu::flashcpu_static) and flashcpu.pc. tests/install checks all of it
# from a consumer's side.
include(CMakePackageConfigHelpers)

set(FLASHCPU_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashcpu)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/flashcpu
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS flashcpu flashcpu_static EXPORT flashcpuTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashcpuTargets NAMESPACE flashcpu::
  DESTINATION ${FLASHCPU_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flashcpuConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashcpuConfig.cmake
  INSTALL_DESTINATION ${FLASHCPU_CMAKE_DIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/flashcpuConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashcpuConfig.cmake
              ${PROJECT_BINARY_DIR}/flashcpuConfigVersion.cmake
  DESTINATION ${FLASHCPU_CMAKE_DIR})

# pkg-config: -lflashcpu links the shared library; --static adds what the
# static archive needs (OpenMP as the compiler spells it, hwloc, libm).
#
# The file is written at install time, not at configure time, so that its
# prefix is the one actually installed to: `cmake --install --prefix DIR`
# changes CMAKE_INSTALL_PREFIX only then. (A ${pcfiledir}-relative prefix
# would also relocate, but gives -I/usr/lib/<triplet>/pkgconfig/../../include
# for a /usr install, which pkg-config does not recognise as a system folder.)
set(FLASHCPU_PC_OPENMP_LIBS "${OpenMP_C_FLAGS}")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(FLASHCPU_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(FLASHCPU_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
set(FLASHCPU_PC_FILE ${PROJECT_BINARY_DIR}/flashcpu.pc)
install(CODE "
  set(PROJECT_DESCRIPTION [==[${PROJECT_DESCRIPTION}]==])
  set(PROJECT_VERSION [==[${PROJECT_VERSION}]==])
  set(FLASHCPU_PC_LIBDIR [==[${FLASHCPU_PC_LIBDIR}]==])
  set(FLASHCPU_PC_INCLUDEDIR [==[${FLASHCPU_PC_INCLUDEDIR}]==])
  set(FLASHCPU_PC_OPENMP_LIBS [==[${FLASHCPU_PC_OPENMP_LIBS}]==])
  configure_file([==[${PROJECT_SOURCE_DIR}/cmake/flashcpu.pc.in]==]
                 [==[${FLASHCPU_PC_FILE}]==] @ONLY)
")
install(FILES ${FLASHCPU_PC_FILE}
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Installed programs (the flashcpu tool) find libflashcpu.so in the libdir
# beside their bindir, whatever the prefix: without this, a prefix outside
# the loader's search path gives "libflashcpu.so.0: cannot open shared
# object file".
if(UNIX AND NOT APPLE AND TARGET flashcpu_cli)
  file(RELATIVE_PATH FLASHCPU_BIN_TO_LIB
    ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_property(TARGET flashcpu_cli APPEND PROPERTY
    INSTALL_RPATH "$ORIGIN/${FLASHCPU_BIN_TO_LIB}")
endif()

# The Python package (python/flashcpu), into the prefix's dist-packages
# folder as Debian's python3 searches it (lib/python3/dist-packages under
# /usr, lib/python3.X/dist-packages elsewhere; FLASHCPU_PYTHON_DIR sets
# another). A generated _installed.py tells the package where this install
# put libflashcpu.so.
option(FLASHCPU_INSTALL_PYTHON "Install the Python package" ON)
if(FLASHCPU_INSTALL_PYTHON)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_FOUND)
    set(FLASHCPU_PYTHON_DEFAULT
        "lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/dist-packages")
  else()
    set(FLASHCPU_PYTHON_DEFAULT "lib/python3/dist-packages")
  endif()
  set(FLASHCPU_PYTHON_DIR "" CACHE STRING
      "Where to install the Python package (relative to the prefix, or absolute)")
  install(CODE "
    set(python_dir [==[${FLASHCPU_PYTHON_DIR}]==])
    if(NOT python_dir)
      if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
        set(python_dir lib/python3/dist-packages)
      else()
        set(python_dir [==[${FLASHCPU_PYTHON_DEFAULT}]==])
      endif()
    endif()
    if(NOT IS_ABSOLUTE \"\${python_dir}\")
      set(python_dir \"\${CMAKE_INSTALL_PREFIX}/\${python_dir}\")
    endif()
    set(libdir [==[${CMAKE_INSTALL_LIBDIR}]==])
    if(NOT IS_ABSOLUTE \"\${libdir}\")
      set(libdir \"\${CMAKE_INSTALL_PREFIX}/\${libdir}\")
    endif()
    file(INSTALL [==[${PROJECT_SOURCE_DIR}/python/flashcpu]==]
         DESTINATION \"\$ENV{DESTDIR}\${python_dir}\" PATTERN __pycache__ EXCLUDE)
    file(WRITE \"\$ENV{DESTDIR}\${python_dir}/flashcpu/_installed.py\"
         \"LIBRARY = \\\"\${libdir}/libflashcpu.so\\\"\\n\")
    message(STATUS \"Installing the Python package: \${python_dir}/flashcpu\")
  ")
endif()
