#!/usr/bin/env bash
# Builds flashcpu for the lent AVX-512 machine and bundles what it lacks.
# The device has cmake and PyTorch but none of our Debian -dev packages, so
# the Release build (clang + libomp; the per-ISA translation units make it
# carry AVX-512 code) goes to build-device/ with the shared libraries the
# binaries need (hwloc, libomp, benchmark, ...) copied into
# build-device/bundle-lib. Then call the device tool with
#   carry: ["build-device"]
#   command: bash tools/device/run.sh PARTS [bench filter]
# (PARTS: info, tests, runtime, cli, bench, all, bench-prefill, bench-decode,
# torch, torch-prefill, torch-decode, ab-decode; run.sh lists what each does)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build-device"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
mkdir -p "$build/bundle-lib"
# Every shared library the binaries load, except the C runtime itself,
# which the device has (and must match its kernel).
for binary in "$build"/tools/flashcpu "$build"/bench/flashcpu_bench \
              "$build"/tests/flashcpu_*tests*; do
  [ -x "$binary" ] || continue
  ldd "$binary" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
while read -r lib; do cp -L "$lib" "$build/bundle-lib/"; done
du -sh "$build" | awk '{print "bundle size: " $1}'
ls "$build/bundle-lib"
