#!/usr/bin/env bash
# Builds the library and the `flashcpu` tool of another commit (Release,
# clang, as tools/bundle.sh does) into a folder of its own, for an A/B of
# two versions on one host in one go: tools/run_suite.sh ab-decode runs its
# `flashcpu run` and the bundle's alternately. Times taken on a shared host
# at different moments do not compare; alternating runs do.
#
#   tools/build_commit.sh COMMIT [FOLDER]     (default: build-old)
#
# The commit is checked out into a temporary git worktree, removed after.
# FOLDER/COMMIT records what was built; copy FOLDER beside the bundle when
# the A/B runs on another host.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
commit=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${2:-build-old}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach "$tree" "$commit" >/dev/null
rm -rf "$build"
cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build" -j"$(nproc)" --target flashcpu_cli >/dev/null
echo "$commit" > "$build/COMMIT"
echo "$(basename "$build"): $(git -C "$root" log --oneline -1 "$commit")"
du -sh "$build" | awk '{print "size: " $1}'
