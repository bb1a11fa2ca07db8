# Cross build for aarch64 Linux with Debian's gcc-aarch64-linux-gnu and arm64
# multiarch libraries (libhwloc-dev:arm64, libgtest-dev:arm64). Tests run
# through qemu-user: ctest uses the emulator below.
#   cmake -S . -B build-aarch64 \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers and libraries of the target come from /usr/lib/aarch64-linux-gnu
# (multiarch) and /usr/aarch64-linux-gnu (the cross libc).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR}
    "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# -L / runs the multiarch libc6:arm64 (pulled in by the :arm64 -dev
# packages) with the multiarch libraries. The older cross libc under
# /usr/aarch64-linux-gnu, mixed with those newer libraries, hangs every
# program that starts a thread under qemu 7.2.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
