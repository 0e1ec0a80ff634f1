#!/usr/bin/env bash
# alloc_count.sh: heap allocations per acknowledged message on each member of an RF3
# cluster during rf3_lat.sh's 64-in-flight cell (one client, 64 sealed batches in flight).
# A uprobe on libc's malloc and realloc, with their size argument, counts over ALLOC_SECONDS
# (default 4) in the middle of a 12 s cell, on every member; the counts are divided by the
# messages acknowledged in that window (the cell's rate times the window; the probes slow
# the cell, so the rate is the cell's own). It prints, per member and its role, the
# allocations of more than 1032 bytes (past glibc's per-thread cache, so served by its bins)
# and, over a second window of ALLOC_SECONDS / 2, all allocations.
#   tests/bench/alloc_count.sh                 (this build's bin/)
#   BENCH_BIN=/path/to/other/bin tests/bench/alloc_count.sh
# Needs root (perf probe). The probes it adds are deleted on exit; rf3_lat.sh starts and
# stops every member by pid.
set -u
cd "$(dirname "$0")/../.." || exit 2
secs=${ALLOC_SECONDS:-4}
libc=$(ldd "${BENCH_BIN:-bin}/keyloadd" | awk '/libc\.so/ {print $3}')
[ -n "$libc" ] || { echo "alloc_count: cannot find the libc keyloadd uses"; exit 2; }
out=$(mktemp -d /tmp/kl-alloc-XXXXXX)
added=0
rf3=""
cleanup() {
  [ -n "$rf3" ] && kill -0 "$rf3" 2>/dev/null && { kill -TERM "$rf3" 2>/dev/null; wait "$rf3" 2>/dev/null; }
  [ $added = 1 ] && perf probe -q -d 'probe_kl_alloc:*' >/dev/null 2>&1
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
perf probe -q -x "$libc" --add 'probe_kl_alloc:malloc=malloc bytes=%di:u64' >/dev/null 2>&1 &&
  perf probe -q -x "$libc" --add 'probe_kl_alloc:realloc=realloc bytes=%si:u64' >/dev/null 2>&1 ||
  { echo "alloc_count: perf probe on $libc failed (root and uprobes needed)"; exit 2; }
added=1
RF3_OUT="$out/rf3" RF3_PIPELINE=1 RF3_CELLS=64 RF3_RUNS=1 BENCH_SECONDS=12 \
  RF3_PORT="${RF3_PORT:-18831}" tests/bench/rf3_lat.sh >"$out/rf3.txt" 2>&1 &
rf3=$!
for _ in $(seq 1 240); do grep -q "rf3_lat: leader" "$out/rf3.txt" 2>/dev/null && break; sleep 0.5; done
grep -q "rf3_lat: leader" "$out/rf3.txt" || { echo "alloc_count: the cluster did not start:"; tail -n 5 "$out/rf3.txt"; exit 1; }
leader=$(grep -o "rf3_lat: leader p0m[0-9]" "$out/rf3.txt" | head -1 | awk '{print $3}')
sleep 3
declare -A role
pids=""
for n in p0m1 p0m2 p0m3; do
  p=$(ps -eo pid=,args= | awk -v d="$out/rf3/c/$n" '$2 ~ /keyloadd$/ && index($0, "--data " d " ") {print $1}')
  [ -n "$p" ] || { echo "alloc_count: member $n not found"; exit 1; }
  role[$p]=$n; [ "$n" = "$leader" ] && role[$p]="$n (leader)"
  pids=${pids:+$pids,}$p
done
perf record -q -e probe_kl_alloc:malloc --filter 'bytes > 1032' -e probe_kl_alloc:realloc --filter 'bytes > 1032' \
  -p "$pids" -o "$out/big.data" -- sleep "$secs" >/dev/null 2>&1
half=$(( secs > 1 ? secs / 2 : 1 ))
perf record -q -e probe_kl_alloc:malloc -e probe_kl_alloc:realloc -p "$pids" -o "$out/all.data" -- sleep "$half" >/dev/null 2>&1
wait "$rf3"
rf3=""
line=$(grep "in flight:" "$out/rf3.txt")
rate=$(sed -n 's/.* msgs_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
[ -n "$rate" ] || { echo "alloc_count: the cell gave no result:"; tail -n 5 "$out/rf3.txt"; exit 1; }
echo "alloc_count: bin=${BENCH_BIN:-bin} cell msgs_per_s=$rate window=${secs}s (all: ${half}s)"
big=$(perf script -i "$out/big.data" -F pid 2>/dev/null | sort | uniq -c)
all=$(perf script -i "$out/all.data" -F pid 2>/dev/null | sort | uniq -c)
for p in ${pids//,/ }; do
  b=$(awk -v p="$p" '$2 == p {print $1}' <<<"$big"); a=$(awk -v p="$p" '$2 == p {print $1}' <<<"$all")
  python3 -c 'import sys
b, a, r, s, h = (float(x or 0) for x in sys.argv[1:6])
print("alloc_count: %-14s over_1k_per_msg=%.2f all_per_msg=%.1f" % (sys.argv[6], b / (r * s), a / (r * h)))' \
    "$b" "$a" "$rate" "$secs" "$half" "${role[$p]}"
done
