#!/usr/bin/env bash
# The MCP suite (KL-7 items 4 and 5): installs the pinned official MCP TypeScript SDK from
# package-lock.json (npm ci; node_modules is never committed), then runs the raw stdio
# protocol test, the official-client test and the staged RF3 transfer scenario
# (staged.test.mjs: the C SDK, the official MCP client and both Q1 routes; it needs
# build/scenario-sdk, which `make mcp-test` builds), each against its own real RF3
# cluster. Prints every check and one closing "N passed, N failed" line summing all three
# (tests/support/test-all.sh adds it to the total).
set -u
cd "$(dirname "$0")"
# The official SDK needs Node >= 18 (package.json "engines"); tests/support/deps.sh does not
# install Node, so say what is missing instead of failing obscurely.
if ! command -v node >/dev/null || ! command -v npm >/dev/null ||
   [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 18 ]; then
  echo "FAIL node >= 18 and npm are needed for the MCP suite"; echo "0 passed, 1 failed"; exit 1
fi
if ! timeout 180 npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1; then
  echo "FAIL npm ci (tests/mcp/npm-ci.log):"; tail -n 20 npm-ci.log
  echo "0 passed, 1 failed"
  exit 1
fi
rm -f npm-ci.log
if [ ! -x ../../build/scenario-sdk ]; then
  echo "FAIL build/scenario-sdk is built (make build/scenario-sdk)"; echo "0 passed, 1 failed"; exit 1
fi
passed=0 failed=0 rc=0
for t in raw.test.mjs mcp.test.mjs staged.test.mjs; do
  echo "--- $t"
  out=$(timeout -k 10 270 node "$t" 2>&1); code=$?
  # each script's own closing line, indented so that only the sum below is counted
  sed -E 's/^([0-9]+ passed, [0-9]+ failed)$/  '"$t"': \1/' <<<"$out"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
  if [ -n "$line" ]; then
    passed=$((passed + $(awk '{print $1}' <<<"$line")))
    failed=$((failed + $(awk '{print $3}' <<<"$line")))
  fi
  if [ $code -ne 0 ]; then
    rc=1
    [ -n "$line" ] && [ "$(awk '{print $3}' <<<"$line")" != 0 ] || failed=$((failed + 1))  # died without failing a check
  fi
done
echo "$passed passed, $failed failed"
exit $rc
