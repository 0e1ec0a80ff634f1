#!/usr/bin/env bash
# summary_test.sh: checks the KL-9 summary (peers_summary in peers.sh: summary.py, jq,
# gnuplot) on made-up run lines whose medians and ratios are known, so a wrong median, a
# PASS where a MISS belongs or a missing summary.json key shows up without a 10-minute bench.
# Run: bash tests/bench/peers/summary_test.sh (needs python3, jq, gnuplot: make deps).
set -u
cd "$(dirname "$0")/../../.."
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
stop_pid() { :; }   # peers.sh expects run.sh's; nothing is started here
# shellcheck source=tests/bench/peers/peers.sh
. tests/bench/peers/peers.sh
mkdir -p "$t/out/lat"
passed=0 failed=0
check() {  # NAME CONDITION...
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
}
# Three runs per cell, out of order, so the median is neither the first nor the last.
{
  printf 'rf3_1,1\tbench: p50_us=900 p99_us=2000 msgs_per_s=1000\n'
  printf 'rf3_1,2\tbench: p50_us=300 p99_us=1000 msgs_per_s=3000\n'
  printf 'rf3_1,3\tbench: p50_us=500 p99_us=1500 msgs_per_s=2000\n'
  printf 'js_1,1\tjs: p50_us=600 p99_us=900\n'
  printf 'js_1,2\tjs: p50_us=700 p99_us=900\n'
  printf 'js_1,3\tjs: p50_us=400 p99_us=900\n'
  printf 'rf3_64,1\tbench: msgs_per_s=9000 p99_us=5000 cpu_us_per_msg=30\n'
  printf 'rf3_64,2\tbench: msgs_per_s=11000 p99_us=7000 cpu_us_per_msg=50\n'
  printf 'rf3_64,3\tbench: msgs_per_s=10000 p99_us=6000 cpu_us_per_msg=40\n'
  printf 'rf3_64t,1\tbench: msgs_per_s=7000 p99_us=9000\n'
  printf 'rf3_64t,2\tbench: msgs_per_s=5000 p99_us=8000\n'
  printf 'rf3_64t,3\tbench: msgs_per_s=6000 p99_us=7000\n'
  printf 'js_64,1\tjs: msgs_per_s=12000 p99_us=4000 cpu_us_per_msg=20\n'
  printf 'js_64,2\tjs: msgs_per_s=8000 p99_us=8000 cpu_us_per_msg=20\n'
  printf 'js_64,3\tjs: msgs_per_s=9000 p99_us=5000 cpu_us_per_msg=10\n'
  printf 'xfer_1,1\ttransfer: transfers_per_s=100\n'
  printf 'xfer_32,1\ttransfer: transfers_per_s=1200\n'
  printf 'xfer_32,2\ttransfer: transfers_per_s=1000\n'
  printf 'xfer_32,3\ttransfer: transfers_per_s=800\n'
  printf 'pg_8,1\tpg: transfers_per_s=900\n'
  printf 'pg_8,2\tpg: transfers_per_s=1100\n'
  printf 'pg_8,3\tpg: transfers_per_s=1000\n'
  printf 'coord,1\tcoord: transfers=500 delivered=500 drained=1 transfers_per_s=900\n'
  printf 'coord,2\tcoord: transfers=500 delivered=400 drained=0 transfers_per_s=700\n'
  printf 'coord,3\tcoord: transfers=500 delivered=500 drained=1 transfers_per_s=790\n'
  printf 'longpoll\tentries=0 wait_ms=10012\n'
  printf 'js_source\tjs_source: msgs=10 copied=10 msgs_per_s=5000.0\n'
} >"$t/res.tsv"
seq 100 100 1000 >"$t/out/lat/rf3_1.r1.txt"
seq 50 50 500 >"$t/out/lat/js_1.r1.txt"
out=$(peers_summary "$t/res.tsv" "$t/out" "$t" 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
j=$t/out/summary.json
check "peers_summary succeeds" [ $rc -eq 0 ]
check "summary.json has every KL-9 key" [ "$(jq '[has("rf3_sealed_1c_p50_us", "rf3_sealed_64_msgs_per_s",
  "rf3_sealed_64_p99_us", "js_1c_p50_us", "js_64_msgs_per_s", "js_64_p99_us", "xfer_client_1_per_s",
  "xfer_client_32_per_s", "xfer_coord_per_s", "pg_outbox_1c_per_s", "pg_outbox_8c_per_s",
  "cpu_us_per_msg_rf3_64", "js_cpu_us_per_msg_64")] | all' "$j" 2>/dev/null)" = true ]
check "medians of three runs" [ "$(jq -c '[.rf3_sealed_1c_p50_us, .js_1c_p50_us, .rf3_sealed_64_msgs_per_s,
  .js_64_p99_us, .cpu_us_per_msg_rf3_64, .js_cpu_us_per_msg_64, .xfer_client_32_per_s, .pg_outbox_8c_per_s]' "$j" 2>/dev/null)" \
  = "[500,600,10000,5000,40,20,1000,1000]" ]
check "the 64-thread cell is its own, informational" [ "$(jq -c '[.rf3_sealed_64threads_msgs_per_s,
  .rf3_sealed_64threads_p99_us]' "$j" 2>/dev/null)" = "[6000,8000]" ]
check "1c p99 medians too" [ "$(jq -c '[.rf3_sealed_1c_p99_us, .js_1c_p99_us]' "$j" 2>/dev/null)" = "[1500,900]" ]
check "a cell without runs is null" [ "$(jq '.pg_outbox_1c_per_s' "$j" 2>/dev/null)" = null ]
check "1c p50 500/600 PASS" grep -q "1 publisher p50: 500.0 us / 600.0 us = 0.83x (target <= 1.0x) PASS" <<<"$out"
check "64 msgs/s 10000/9000 PASS" grep -q "JetStream 64 msgs/s: 10000.0 msgs/s / 9000.0 msgs/s = 1.11x (target >= 1.0x) PASS" <<<"$out"
check "64 p99 6000/5000 MISS" grep -q "JetStream 64 p99: 6000.0 us / 5000.0 us = 1.20x (target <= 1.0x) MISS" <<<"$out"
check "transfers 1000/1000 PASS (at the limit)" grep -q "8 clients: 1000.0 /s / 1000.0 /s = 1.00x (target >= 1.0x) PASS" <<<"$out"
check "coordinator: the median of its three runs" [ "$(jq '.xfer_coord_per_s' "$j" 2>/dev/null)" = 790 ]
check "coordinator: every run printed" grep -q "KeyLoad coordinator-driven /s *runs: 900.0, 700.0, 790.0 *median 790.0" <<<"$out"
check "coordinator: an undrained run named" grep -q "coordinator run 2 NOT DRAINED" <<<"$out"
check "coordinator 790/1000 MISS" grep -q "client-driven 32 in flight: 790.0 /s / 1000.0 /s = 0.79x (target >= 0.8x) MISS" <<<"$out"
check "CPU ratio reported" grep -q "KeyLoad 40.0 us / JetStream 20.0 us = 2.00x" <<<"$out"
check "idle long-poll 0 entries PASS" grep -q "0 log entries appended (waited 10012 ms; target 0) PASS" <<<"$out"
check "latency.png written" [ -s "$t/out/latency.png" ]
check "percentile curve of all runs" [ "$(wc -l <"$t/out/lat/rf3_1.pct")" = 11 ]
# A missing peer: no data MISS, never a PASS; a long-poll with entries: MISS.
grep -v '^js_1,' "$t/res.tsv" | sed 's/^longpoll\t.*/longpoll\tentries=3 wait_ms=10003/' >"$t/res2.tsv"
rm -f "$t/out/lat/js_1.r1.txt" "$t/out/latency.png"
out=$(peers_summary "$t/res2.tsv" "$t/out" "$t" 2>&1)
check "the plot's key names the empty cell" grep -q 'n_js_1 = "NO DATA"' "$t/out/lat/titles.gp"
check "latency.png written without one cell's data" [ -s "$t/out/latency.png" ]
check "no peer data: MISS" grep -q "JetStream 1 publisher p50: no data MISS" <<<"$out"
check "idle long-poll 3 entries MISS" grep -q "3 log entries appended (waited 10003 ms; target 0) MISS" <<<"$out"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
