#!/usr/bin/env bash
# Checks the tree's style: every C and C++ file git tracks against
# .clang-format (clang-format 14, Debian 12's), every Python file against
# .flake8. Exits non-zero and lists what differs.
#   tools/check_style.sh          check
#   tools/check_style.sh --fix    rewrite the C and C++ files in place
# Needs clang-format and flake8 (Debian: clang-format, flake8).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fix=0
[ "${1:-}" = "--fix" ] && fix=1
for tool in clang-format flake8; do
  command -v "$tool" >/dev/null ||
    { echo "check_style.sh: $tool not found (apt-get install $tool)" >&2; exit 2; }
done
mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.inc')
status=0
if [ "$fix" -eq 1 ]; then
  clang-format -i "${sources[@]}"
else
  clang-format --dry-run -Werror "${sources[@]}" 2>&1 | grep -E '^[^ ].*: error' |
    cut -d: -f1 | sort -u | sed 's/^/not formatted: /' || true
  clang-format --dry-run -Werror "${sources[@]}" >/dev/null 2>&1 || status=1
fi
mapfile -t scripts < <(git ls-files '*.py')
flake8 "${scripts[@]}" || status=1
[ "$status" -eq 0 ] && echo "style: ${#sources[@]} C/C++ files and ${#scripts[@]} Python files pass"
exit "$status"
