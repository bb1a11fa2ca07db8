#!/usr/bin/env bash
# Builds the library and the `flashcpu` CLI of an older commit into
# build-old/ (Release, clang, like bundle.sh), for a same-call A/B on the
# device: the machine behind the device tool changes between calls, so only
# runs made in one call compare. Then carry ["build-device", "build-old"]
# and run `bash tools/device/run.sh ab-decode`.
#   build_old.sh COMMIT
set -euo pipefail
commit=${1:?usage: build_old.sh COMMIT}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach "$tree" "$commit" >/dev/null
rm -rf "$root/build-old"
cmake -S "$tree" -B "$root/build-old" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$root/build-old" -j"$(nproc)" --target flashcpu_cli >/dev/null
echo "$commit" > "$root/build-old/COMMIT"
echo "build-old: $(git -C "$root" log --oneline -1 "$commit")"
du -sh "$root/build-old" | awk '{print "size: " $1}'
