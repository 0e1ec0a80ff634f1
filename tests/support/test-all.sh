#!/usr/bin/env bash
# make test: every suite in order, each under its printed budget (they add up to 2700 s), then one
# closing "N passed, N failed" line summing every runner's own closing line.
set -u
cd "$(dirname "$0")/../.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
rc=0
for target in structure-test golden-test unit-test process-test mcp-test examples-test fuzz-run lossyfs-test clockstep-test tailclock-test nemesis-test; do
  make --no-print-directory "$target" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
passed=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | awk '{s += $3} END {print s + 0}')
echo "=== make test: all suites took $(( $(date +%s) - start ))s (budget 2700s) ==="
[ $rc -eq 0 ] || [ "$failed" -gt 0 ] || failed=1   # a suite that died without its line still fails
echo "$passed passed, $failed failed"
exit $rc
