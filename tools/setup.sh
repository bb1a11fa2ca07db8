#!/usr/bin/env bash
# flashcpu set-up: the two commands of the README.
#
#   tools/setup.sh run  [flashcpu run arguments...]
#       installs missing Debian 12 packages, builds flashcpu (Release, clang +
#       libomp) in build/, then runs `build/tools/flashcpu run` with the
#       arguments given (try `tools/setup.sh run --help`).
#   tools/setup.sh test [ctest arguments...]
#       the same set-up and a full build, then the test suite:
#       ctest --test-dir build --output-on-failure -j$(nproc) (every suite;
#       the kernel suite's quick set, see tests/CMakeLists.txt), and the
#       Python package's tests (python3 -m pytest tests/python)
#
# Environment:
#   FLASHCPU_BUILD_DIR   build folder (default: build/ in the repository)
#   FLASHCPU_JOBS        parallel build and test jobs (default: nproc)
#   FLASHCPU_TEST_DEPTH  quick (default), reduced or full: how much of the
#                        kernel suite ctest runs (full: every kernel x case)
#   CI=true              warnings are errors (-DFLASHCPU_WERROR=ON)
#   FLASHCPU_MPI=1       also install Open MPI and mpi4py (libopenmpi-dev,
#                        openmpi-bin, python3-mpi4py), so that the build
#                        has libflashcpu_mpi and the tests run it under
#                        mpirun (docs/mpi.md)
#
# Safe to run again: it installs only what is missing, reconfigures and
# rebuilds only what changed. Works from any current directory.
set -euo pipefail

readonly ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Debian 12 packages. libudev-dev: hwloc's pkg-config file names -ludev for
# static linking, which `pkg-config --static --libs flashcpu` (and its install
# test) passes on.
# python3-numpy, python3-pytest: the Python package's tests.
PACKAGES=(cmake make pkg-config clang libomp-dev libhwloc-dev
          libudev-dev libgtest-dev libbenchmark-dev python3-numpy
          python3-pytest)
# Context parallelism (libflashcpu_mpi), when asked for.
if [ "${FLASHCPU_MPI:-0}" = "1" ]; then
  PACKAGES+=(libopenmpi-dev openmpi-bin python3-mpi4py)
fi
readonly PACKAGES

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

install_missing_packages() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    say "no dpkg-query: not a Debian system, so not installing packages."
    say "flashcpu needs: cmake, make, pkg-config, clang, an OpenMP runtime" \
        "(libomp), hwloc, GoogleTest and google-benchmark development files."
    return 0
  fi
  local missing=() package
  for package in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
        grep -q 'install ok installed'; then
      missing+=("$package")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "packages: all present (${PACKAGES[*]})"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    printf '[setup] missing Debian packages: %s\n' "${missing[*]}" >&2
    printf '[setup] install them, then run this again:\n' >&2
    printf '  sudo apt-get install -y --no-install-recommends %s\n' \
      "${missing[*]}" >&2
    exit 1
  fi
  say "installing missing packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
}

# The C compiler a build folder was configured with ("" when unconfigured).
configured_compiler() {
  local cache="$1/CMakeCache.txt"
  [ -f "$cache" ] || return 0
  sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$cache"
}

configure_and_build() {
  local what="$1" # "cli": only the tool; "all": everything (tests too)
  local werror=OFF
  [ "${CI:-}" = "true" ] && werror=ON

  local compiler
  compiler="$(configured_compiler "$BUILD_DIR")"
  if [ -n "$compiler" ] && [[ "$(basename "$compiler")" != clang* ]]; then
    die "$BUILD_DIR was configured with $compiler, not clang. Remove it" \
        "(rm -rf '$BUILD_DIR') or choose another folder with FLASHCPU_BUILD_DIR."
  fi

  say "configuring $BUILD_DIR (Release, clang + libomp, FLASHCPU_WERROR=$werror," \
      "FLASHCPU_TEST_DEPTH=$DEPTH)"
  # CC/CXX choose the compiler on the first configure; later runs keep it.
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DFLASHCPU_WERROR="$werror" \
    -DFLASHCPU_BUILD_TESTS=ON \
    -DFLASHCPU_TEST_DEPTH="$DEPTH"

  if [ "$what" = "cli" ]; then
    say "building flashcpu_cli with $JOBS jobs"
    cmake --build "$BUILD_DIR" --parallel "$JOBS" --target flashcpu_cli
  else
    say "building everything with $JOBS jobs"
    cmake --build "$BUILD_DIR" --parallel "$JOBS"
  fi
}

main() {
  local mode="${1:-}"
  case "$mode" in
    run | test) shift ;;
    -h | --help | help) usage; exit 0 ;;
    "") usage >&2; exit 2 ;;
    *) usage >&2; die "unknown mode '$mode': use 'run' or 'test'" ;;
  esac

  BUILD_DIR="${FLASHCPU_BUILD_DIR:-$ROOT/build}"
  # A relative FLASHCPU_BUILD_DIR is relative to the current directory.
  case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
  JOBS="${FLASHCPU_JOBS:-$(nproc)}"
  DEPTH="${FLASHCPU_TEST_DEPTH:-quick}"
  case "$DEPTH" in
    quick | reduced | full) ;;
    *) die "FLASHCPU_TEST_DEPTH is '$DEPTH': use quick, reduced or full" ;;
  esac

  install_missing_packages
  if [ "$mode" = "run" ]; then
    configure_and_build cli
    say "running: $BUILD_DIR/tools/flashcpu run $*"
    exec "$BUILD_DIR/tools/flashcpu" run "$@"
  else
    configure_and_build all
    say "testing: ctest --test-dir $BUILD_DIR --output-on-failure -j$JOBS $*"
    ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error \
      -j"$JOBS" "$@"
    say "testing the Python package: python3 -m pytest tests/python"
    FLASHCPU_LIBRARY="$BUILD_DIR/src/libflashcpu.so" /usr/bin/python3 -m pytest \
      -q "$ROOT/tests/python"
    say "all tests passed"
  fi
}

main "$@"
