# Installs the header, both libraries, a CMake package (flashcpu::flashcpu,
# flashcpu::flashcpu_static) and flashcpu.pc.
include(CMakePackageConfigHelpers)

set(FLASHCPU_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashcpu)
install(DIRECTORY include/flashcpu DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS flashcpu flashcpu_static EXPORT flashcpuTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashcpuTargets NAMESPACE flashcpu::
  DESTINATION ${FLASHCPU_CMAKE_DIR})
configure_package_config_file(cmake/flashcpuConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashcpuConfig.cmake
  INSTALL_DESTINATION ${FLASHCPU_CMAKE_DIR})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/flashcpuConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashcpuConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flashcpuConfigVersion.cmake
  DESTINATION ${FLASHCPU_CMAKE_DIR})

# pkg-config: -lflashcpu links the shared library; --static adds what the
# static archive needs (OpenMP as the compiler spells it, hwloc, libm).
set(FLASHCPU_PC_OPENMP_LIBS "${OpenMP_C_FLAGS}")
configure_file(cmake/flashcpu.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flashcpu.pc
  @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashcpu.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
