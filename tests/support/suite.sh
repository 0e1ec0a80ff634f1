#!/usr/bin/env bash
# suite.sh NAME BUDGET_SECONDS CMD...: runs one test suite under a printed time budget
# (DESIGN.md §12); a suite over budget is killed and fails.
set -u
name=$1 budget=$2; shift 2
echo "=== suite: $name (budget ${budget}s) ==="
start=$(date +%s)
timeout --kill-after=10 "$budget" "$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  echo "=== suite: $name FAILED: over its ${budget}s budget ==="
  exit 1
fi
if [ $rc -ne 0 ]; then
  echo "=== suite: $name FAILED (exit $rc) after ${took}s of ${budget}s ==="
  exit $rc
fi
echo "=== suite: $name passed in ${took}s of ${budget}s ==="
