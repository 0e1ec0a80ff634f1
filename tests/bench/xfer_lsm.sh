#!/usr/bin/env bash
# xfer_lsm.sh: what a transfer costs RocksDB in background writes, and how the transfer cell
# slows as the cluster's state grows. Runs run.sh's xcoord part (3 partitions x 3 members;
# per round the client-driven 32-in-flight cell, then the coordinator-driven cell on the same
# cluster, as the peers part does) for XFER_LSM_ROUNDS rounds with BENCH_KEEP=1, then reads
# every member's RocksDB LOG: per column family ("default" is the state, "log" the log) the
# flushes and the bytes they wrote (their memtables' data size), and the compactions' output
# bytes and CPU, each also per transfer of the whole run (client-driven and
# coordinator-driven). Prints the client-driven cell's rate and the machine's idle share per
# round first.
#   tests/bench/xfer_lsm.sh
#   BENCH_BIN=/path/to/other/bin tests/bench/xfer_lsm.sh
# Environment: BENCH_BIN (default bin), XFER_LSM_ROUNDS (default 3), BENCH_SECONDS (per cell,
#              default 5).
# run.sh starts and stops every process by pid; this script deletes only the directory that
# run.sh says it kept for this run.
set -u
cd "$(dirname "$0")/../.." || exit 2
rounds=${XFER_LSM_ROUNDS:-3}
out=$(mktemp /tmp/kl-xfer-lsm-XXXXXX)
kept=""
cleanup() {
  [ -n "$kept" ] && [ -d "$kept" ] && rm -rf "$kept"
  rm -f "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
BENCH_KEEP=1 BENCH_PARTS=xcoord BENCH_XCOORD_CELLS=32 BENCH_ROUNDS="$rounds" \
  BENCH_SECONDS="${BENCH_SECONDS:-5}" timeout 1800 bash tests/bench/run.sh >"$out" 2>&1
rc=$?
kept=$(sed -n 's/^bench: kept \(.*\)$/\1/p' "$out" | tail -n 1)
[ $rc -eq 0 ] || { echo "xfer_lsm: run.sh failed (exit $rc):"; tail -n 5 "$out"; exit 1; }
[ -n "$kept" ] && [ -d "$kept/kl4" ] || { echo "xfer_lsm: run.sh kept no cluster directory"; exit 1; }
r=0
while IFS= read -r line; do
  r=$((r + 1))
  echo "xfer_lsm: round $r client-driven $line"
done < <(paste -d' ' <(grep -o "in_flight=32 .*transfers_per_s=[0-9.]*" "$out" | grep -o "transfers_per_s=[0-9.]*") \
                     <(grep "transfer in flight 32, scheduling" "$out" | grep -o "idle [0-9]*%"))
transfers=$( (grep "in_flight=32 " "$out" | grep -o " transfers=[0-9]*"; grep "coordinator, default config" "$out" | grep -o " delivered=[0-9]*") |
             cut -d= -f2 | paste -sd+ | bc)
[ -n "$transfers" ] && [ "$transfers" -gt 0 ] || { echo "xfer_lsm: no transfers in the run"; exit 1; }
echo "xfer_lsm: bin=${BENCH_BIN:-bin} rounds=$rounds transfers=$transfers (client-driven and coordinator-driven)"
for m in p1m1 p1m2 p1m3 p2m1 p2m2 p2m3; do
  log=$kept/kl4/$m/LOG
  [ -f "$log" ] || { echo "xfer_lsm: $log is missing"; exit 1; }
  python3 - "$log" "$m" "$transfers" <<'EOF' || exit 1
import collections, json, re, sys
log, member, transfers = sys.argv[1], sys.argv[2], int(sys.argv[3])
family = {}  # job -> column family, from the "[family] [JOB n]" lines before each event
flush_n, flush_b = collections.Counter(), collections.Counter()
comp_n, comp_b, comp_cpu = collections.Counter(), collections.Counter(), collections.Counter()
for line in open(log, errors="replace"):
    m = re.search(r"\[([A-Za-z0-9_]+)\] \[JOB (\d+)\]", line)
    if m:
        family[int(m.group(2))] = m.group(1)
    i = line.find("EVENT_LOG_v1")
    if i < 0:
        continue
    try:
        e = json.loads(line[i + len("EVENT_LOG_v1"):])
    except ValueError:
        continue
    cf = family.get(e.get("job"), "?")
    if e.get("event") == "flush_started":
        flush_n[cf] += 1
        flush_b[cf] += e.get("total_data_size", 0)
    elif e.get("event") == "compaction_finished":
        comp_n[cf] += 1
        comp_b[cf] += e.get("total_output_size", 0)
        comp_cpu[cf] += e.get("compaction_time_cpu_micros", 0)
parts = []
for cf in sorted(set(flush_n) | set(comp_n)):
    parts.append("%s: flushes=%d flush_mb=%d flush_b_per_xfer=%d compactions=%d compaction_mb=%d "
                 "compaction_b_per_xfer=%d compaction_cpu_us_per_xfer=%.1f"
                 % (cf, flush_n[cf], flush_b[cf] >> 20, flush_b[cf] // transfers, comp_n[cf],
                    comp_b[cf] >> 20, comp_b[cf] // transfers, comp_cpu[cf] / transfers))
total = sum(flush_b.values()) + sum(comp_b.values())
print("xfer_lsm: %s %s; all: %d B per transfer" % (member, "; ".join(parts), total // transfers))
EOF
done
