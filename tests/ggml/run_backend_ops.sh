#!/usr/bin/env bash
# ggml's own test of flash attention through the flashcpu backend:
# test-backend-ops (built from the tree the backend was compiled against)
# runs every FLASH_ATTN_EXT case on the FLASHCPU device and compares it
# with ggml's CPU backend within ggml's error bound. Cases the backend's
# supports_op declines are reported "not supported" and counted apart.
#
#   run_backend_ops.sh TEST_BACKEND_OPS MODULE [test-backend-ops options]
#
# Prints the counts: accepted (passed, failed) and declined. Exits 0 when
# every accepted case passed, 1 otherwise, 77 (ctest's skip) when no
# test-backend-ops or module is given, with the reason.
set -uo pipefail
tbo=${1:-} module=${2:-}
shift 2 2>/dev/null || shift $#
if [ -z "$module" ]; then
  echo "skipped: no ggml tree given (configure with -DFLASHCPU_GGML=<ggml or llama.cpp source tree>)"
  exit 77
fi
if [ ! -x "$tbo" ]; then
  echo "skipped: no test-backend-ops at '$tbo'"
  exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
GGML_BACKEND_PATH="$module" "$tbo" -o FLASH_ATTN_EXT -b FLASHCPU "$@" >"$log" 2>&1
status=$?
# Colour codes out; one line per case: "  FLASH_ATTN_EXT(...): <verdict>".
cases=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^  FLASH_ATTN_EXT\(')
passed=$(grep -cE ': OK$' <<<"$cases")
failed=$(grep -cE 'FAIL$' <<<"$cases")
declined=$(grep -cE 'not supported' <<<"$cases")
total=$(grep -c . <<<"$cases")
echo "FLASH_ATTN_EXT on FLASHCPU: $total cases, $((passed + failed)) accepted ($passed passed, $failed failed), $declined declined"
if ! grep -q 'Backend FLASHCPU: ' "$log"; then
  echo "the FLASHCPU device did not run (was the module loaded?):"
  tail -n 20 "$log"
  exit 1
fi
if [ "$failed" -ne 0 ] || [ "$status" -ne 0 ] || [ "$passed" -eq 0 ]; then
  sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E 'FAIL$|ERR =|NaN|mismatch' | head -n 40
  echo "test-backend-ops exit status $status"
  exit 1
fi
exit 0
