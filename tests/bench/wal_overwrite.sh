#!/usr/bin/env bash
# wal_overwrite.sh: what KeyLoad would gain if a commit's fdatasync never grew its file.
# Alternates, WAL_RUNS times (default 3), the RF3 64-in-flight cell of cpu64.sh (msgs/s,
# p99, CPU per message) and the 1-client cell of rf3_lat.sh (p50, p99, the synced write's
# sync time per member), first as built, then with tests/bench/walshim/wal_overwrite.c
# preloaded into every process the cells start (it makes RocksDB's WAL an overwrite of
# zero-filled blocks; its header says why KeyLoad cannot ship that). A measurement, not a
# build of KeyLoad. Environment: BENCH_SECONDS (per cell, default 8), WAL_RUNS (default 3).
set -u
cd "$(dirname "$0")/../.." || exit 2
runs=${WAL_RUNS:-3}
secs=${BENCH_SECONDS:-8}
mkdir -p build
shim=$PWD/build/wal_overwrite.so
cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$shim" tests/bench/walshim/wal_overwrite.c -ldl || exit 2
for r in $(seq 1 "$runs"); do
  for mode in built overwrite; do
    pre=""
    [ "$mode" = overwrite ] && pre=$shim
    line=$(LD_PRELOAD=$pre CPU64_RUNS=1 CPU64_CLIENTS=1 CPU64_IN_FLIGHT=64 BENCH_SECONDS=$secs \
           bash tests/bench/cpu64.sh 2>&1 | grep -o 'msgs_per_s=.*cpu_us_per_msg=[0-9.]*')
    echo "wal_overwrite: run $r $mode 64 in flight: ${line:-no result}"
    out=$(LD_PRELOAD=$pre RF3_CELLS=1 RF3_PIPELINE=1 BENCH_SECONDS=$secs bash tests/bench/rf3_lat.sh 2>&1)
    lat=$(grep -o 'p50_us=[0-9.]* p99_us=[0-9.]*' <<<"$out" | head -n 1)
    sync=$(grep -o 'w_sync_p50_us=[0-9]*' <<<"$out" | sed 's/w_sync_p50_us=//' | tr '\n' ' ')
    echo "wal_overwrite: run $r $mode 1 in flight: ${lat:-no result} sync_p50_us_per_member_report=[ ${sync}]"
  done
done
