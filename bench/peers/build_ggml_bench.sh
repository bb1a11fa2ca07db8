#!/usr/bin/env bash
# Builds ggml_attention_bench (llama.cpp's CPU flash attention, from ggml) for
# comparing with flashcpu on the same host. ggml is MIT-licensed third-party
# code that flashcpu does not vendor: give it a ggml source tree (github.com/
# ggml-org/ggml, or llama.cpp's ggml/ folder).
#
#   bench/peers/build_ggml_bench.sh GGML_SOURCE OUT_DIR
#
# ggml is built static, CPU only, with gcc and OpenMP, for x86-64 with AVX2,
# FMA, F16C and AVX-512 (F, VNNI, BF16) and not -march=native, so that the
# binary runs on other AVX-512 hosts; OUT_DIR gets the binary and libgomp.
# Run: OUT_DIR/ggml_attention_bench --threads N [--reps N] [--case decode]
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
src=$(cd "$1" && pwd); out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build="$out/ggml-build"
mkdir -p "$out"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
  -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
libs=$(find "$build" -name 'libggml-cpu.a' -o -name 'libggml-base.a' -o -name 'libggml.a' | sort)
g++ -O2 -fopenmp -I"$src/include" -x c "$here/ggml_attention_bench.c" -x none \
  -Wl,--start-group $libs -Wl,--end-group -lm -lpthread \
  -o "$out/ggml_attention_bench"
cp -L "$(g++ -print-file-name=libgomp.so.1)" "$out/"
echo "built $out/ggml_attention_bench (run with LD_LIBRARY_PATH=$out)"
