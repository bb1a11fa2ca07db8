#!/usr/bin/env bash
# Builds a relocatable Release bundle of flashcpu: the library, the flashcpu
# tool, the benchmarks and the test binaries in one folder, with every shared
# library they load (hwloc, libomp, google-benchmark, GoogleTest, ...) copied
# beside them into <folder>/bundle-lib. Copy the repository with that folder
# in it to another x86-64 Linux host that lacks the -dev packages and run
# tools/run_suite.sh there from the repository root.
#
#   tools/bundle.sh [FOLDER [CMAKE_ARGS...]]    (default: build-bundle)
#
# The build is Release with $CC and $CXX (default clang and clang++, with
# libomp; CC=gcc CXX=g++ builds with libgomp); CMAKE_ARGS go to cmake as
# they are (e.g. -DFLASHCPU_BUILD_TESTS=OFF). The per-ISA translation units
# carry AVX2 and AVX-512 code whatever the building CPU, so the bundle runs
# the best kernels the other host has. The C runtime itself (libc, libm,
# libpthread, libdl, librt, the dynamic loader) is not copied: the other
# host's must match its kernel.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${1:-}" in
  -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
               exit 0 ;;
esac
build=${1:-build-bundle}
shift || true
case "$build" in /*) ;; *) build="$root/$build" ;; esac
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DFLASHCPU_BUILD_PROBES=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
mkdir -p "$build/bundle-lib"
# Every shared library the bundle's programs load, except the C runtime.
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
for dir in "$build/tools" "$build/bench" "$build/tests"; do
  [ -d "$dir" ] || continue
  find "$dir" -maxdepth 3 -type f -perm -u+x -name 'flashcpu*'
done | while read -r binary; do
  is_elf "$binary" || continue
  ldd "$binary" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
while read -r lib; do cp -L "$lib" "$build/bundle-lib/"; done
du -sh "$build" | awk '{print "bundle size: " $1}'
ls "$build/bundle-lib"
