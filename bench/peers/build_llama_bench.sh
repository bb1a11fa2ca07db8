#!/usr/bin/env bash
# Builds what llama_bench_compare.sh runs, from a llama.cpp source tree you
# provide (flashcpu vendors none of it; nothing is fetched):
#   - llama.cpp with shared libraries (llama-bench, test-backend-ops), gcc,
#     OpenMP, x86-64 with AVX2, FMA, F16C and AVX-512 (F, VNNI, BF16), not
#     -march=native, so that the binaries run on other AVX-512 hosts;
#   - flashcpu's ggml backend (libggml-flashcpu.so) against that tree's
#     ggml, with gcc so that it shares ggml's OpenMP runtime (libgomp);
#   - make_random_llama and llama_greedy_tokens (this folder) against it.
#
#   bench/peers/build_llama_bench.sh LLAMA_SRC PACKAGE_DIR [WORK_DIR]
#
# PACKAGE_DIR gets only what the runs need (bin/, lib/ with libgomp, hwloc
# and libstdc++, the tokenizer GGUF: about 20 MB), so that it can be copied to
# another host and run there with no network; WORK_DIR (default
# PACKAGE_DIR.work) holds the CMake builds. JOBS sets the parallel jobs,
# LLAMA_LABEL how BUILD_INFO names the llama.cpp tree (default: its folder
# and git commit).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
src=$(cd "$1" && pwd)
mkdir -p "$2"
package=$(cd "$2" && pwd)
work=${3:-$package.work}
mkdir -p "$work"
work=$(cd "$work" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
jobs=${JOBS:-$(nproc)}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
[ -f "$src/include/llama.h" ] || { echo "$src is not a llama.cpp tree" >&2; exit 2; }
vocab="$src/models/ggml-vocab-llama-spm.gguf"
[ -f "$vocab" ] || { echo "$vocab is missing" >&2; exit 2; }

echo "== llama.cpp ($src)"
cmake -S "$src" -B "$work/llama" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ "${launcher[@]}" \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON \
  -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON \
  -DGGML_AVX512_BF16=ON -DGGML_OPENMP=ON -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >/dev/null
cmake --build "$work/llama" -j"$jobs" --target llama-bench test-backend-ops

echo "== flashcpu's ggml backend"
cmake -S "$root" -B "$work/flashcpu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ "${launcher[@]}" \
  -DFLASHCPU_GGML="$src" -DFLASHCPU_BUILD_TESTS=OFF \
  -DFLASHCPU_BUILD_BENCH=OFF -DFLASHCPU_BUILD_TOOLS=OFF \
  -DFLASHCPU_BUILD_MPI=OFF >/dev/null
cmake --build "$work/flashcpu" -j"$jobs" --target ggml-flashcpu

echo "== the model and greedy-token programs"
mkdir -p "$package/bin" "$package/lib"
ggml_include=(-I"$src/ggml/include" -I"$src/include")
gcc -O2 -std=c11 "${ggml_include[@]}" "$here/make_random_llama.c" \
  -L"$work/llama/bin" -lggml-base -lm -o "$package/bin/make_random_llama"
gcc -O2 -std=c11 "${ggml_include[@]}" "$here/llama_greedy_tokens.c" \
  -L"$work/llama/bin" -lllama -lggml -lggml-base -lm -o "$package/bin/llama_greedy_tokens"

echo "== package $package"
cp "$work/llama/bin/llama-bench" "$work/llama/bin/test-backend-ops" "$package/bin/"
# Each shared library once, under the name the binaries ask for (its soname).
for lib in "$work"/llama/bin/lib*.so*; do
  if [ -L "$lib" ]; then continue; fi
  soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
  cp "$lib" "$package/lib/${soname:-$(basename "$lib")}"
done
cp "$work/flashcpu/src/ggml/libggml-flashcpu.so" "$package/lib/"
# The runtimes the host may lack or have older: OpenMP, hwloc, the C++ one.
for lib in libgomp.so.1 libhwloc.so.15 libstdc++.so.6 libgcc_s.so.1; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found { print $NF; found = 1 }')
  if [ -n "$path" ]; then cp -L "$path" "$package/lib/"; fi
done
cp "$vocab" "$package/"
strip --strip-unneeded "$package"/bin/* "$package"/lib/*.so* 2>/dev/null || true
{
  echo "llama.cpp: ${LLAMA_LABEL:-$(basename "$src") $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo "(no git)")}"
  echo "flashcpu: $(git -C "$root" describe --always --dirty 2>/dev/null || echo "(no git)")"
  echo "built: $(date -u +%Y-%m-%dT%H:%MZ) with $(gcc --version | head -n 1)"
} >"$package/BUILD_INFO"
du -sh "$package"
echo "run: bench/peers/llama_bench_compare.sh $package OUT_DIR --threads N"
