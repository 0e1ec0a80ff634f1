#!/usr/bin/env bash
# lsm_age.sh: what RocksDB's flushes and compactions cost as one cluster's state grows. Runs
# rf3_lat.sh's 64-in-flight cell (one client, 64 sealed batches in flight, RF3_PIPELINE=1)
# LSM_RUNS times on one cluster that is never drained, like the peers part's KeyLoad cells,
# then reads every member's RocksDB LOG: compactions, their output bytes and CPU, flushes,
# each per acknowledged message of all cells. Prints one line per member and the cells'
# msg/s in order.
#   tests/bench/lsm_age.sh                  (this build's bin/)
#   BENCH_BIN=/path/to/other/bin tests/bench/lsm_age.sh
# Environment: BENCH_BIN (default bin), LSM_RUNS (default 4), BENCH_SECONDS (per cell,
#              default 8), RF3_PORT (default 18631), LSM_OUT (a directory kept for the logs
#              and data; default a temporary one that is removed).
# rf3_lat.sh starts and stops every process by pid.
set -u
cd "$(dirname "$0")/../.." || exit 2
runs=${LSM_RUNS:-4}
if [ -n "${LSM_OUT:-}" ]; then out=$LSM_OUT; keep=1; mkdir -p "$out" || exit 2; else out=$(mktemp -d /tmp/kl-lsm-age-XXXXXX); keep=0; fi
rm -rf "$out/rf3"
trap '[ $keep = 1 ] || rm -rf "$out"' EXIT
RF3_OUT="$out/rf3" RF3_PIPELINE=1 RF3_CELLS=64 RF3_RUNS="$runs" BENCH_SECONDS="${BENCH_SECONDS:-8}" \
  RF3_PORT="${RF3_PORT:-18631}" tests/bench/rf3_lat.sh >"$out/rf3_lat.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "lsm_age: rf3_lat.sh failed (exit $rc):"; tail -n 5 "$out/rf3_lat.txt"; exit 1; }
msgs=$(grep "in flight:" "$out/rf3_lat.txt" | grep -o " batches=[0-9]*" | cut -d= -f2 | paste -sd+ | bc)
rates=$(grep "in flight:" "$out/rf3_lat.txt" | grep -o "msgs_per_s=[0-9.]*" | cut -d= -f2 | paste -sd' ')
[ -n "$msgs" ] && [ "$msgs" -gt 0 ] || { echo "lsm_age: no acknowledged messages"; exit 1; }
echo "lsm_age: bin=${BENCH_BIN:-bin} cells=$runs messages=$msgs msgs_per_s=[$rates]"
for m in p0m1 p0m2 p0m3; do
  log=$out/rf3/c/$m/LOG
  [ -f "$log" ] || { echo "lsm_age: $log is missing"; exit 1; }
  # the LOG may have rolled: read the old files too
  ev=$(cat "$out/rf3/c/$m"/LOG.old.* "$log" 2>/dev/null)
  n=$(grep -c compaction_finished <<<"$ev")
  bytes=$(grep compaction_finished <<<"$ev" | grep -o '"total_output_size": [0-9]*' | awk '{s += $2} END {print s + 0}')
  cpu=$(grep compaction_finished <<<"$ev" | grep -o '"compaction_time_cpu_micros": [0-9]*' | awk '{s += $2} END {print s + 0}')
  flushes=$(grep -c flush_finished <<<"$ev")
  echo "lsm_age: $m compactions=$n output_mb=$((bytes >> 20)) cpu_s=$(echo "scale=2; $cpu / 1000000" | bc)" \
       "output_bytes_per_msg=$((bytes / msgs)) cpu_us_per_msg=$(echo "scale=1; $cpu / $msgs" | bc) flushes=$flushes"
done
