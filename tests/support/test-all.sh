#!/usr/bin/env bash
# make test: every suite in order, each under its printed budget (they add up to 2700 s), then one
# closing "N passed, N failed" line summing every runner's own closing line. A suite whose make
# target fails without reporting a failure of its own (it died, did not build, or has no closing
# line) counts as one failure, and its name is printed, whatever the other suites did.
set -u
cd "$(dirname "$0")/../.."
start=$(date +%s)
rc=0
passed=0
failed=0
died=""
for target in structure-test bench-summary-test golden-test unit-test process-test mcp-test examples-test fuzz-run lossyfs-test clockstep-test tailclock-test nemesis-test; do
  log=$(mktemp)
  make --no-print-directory "$target" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  p=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
  f=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | awk '{s += $3} END {print s + 0}')
  rm -f "$log"
  if [ "$status" -ne 0 ]; then
    rc=1
    if [ "$f" -eq 0 ]; then
      f=1
      died="$died $target"
    fi
  fi
  passed=$((passed + p))
  failed=$((failed + f))
done
echo "=== make test: all suites took $(( $(date +%s) - start ))s (budget 2700s) ==="
[ -z "$died" ] || echo "=== failed without a failure count of their own:$died ==="
echo "$passed passed, $failed failed"
exit $rc
