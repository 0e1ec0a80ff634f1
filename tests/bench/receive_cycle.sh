#!/usr/bin/env bash
# The receive-heavy cell: an RF3 partition (three local keyloadd, no sessions, as the
# KL-1/KL-2 cells of run.sh) and `keyload-bench --cycle` (each request an enqueue, then a
# Receive of one message of the client's own lane and its Ack, each its own batch), so every
# Receive scans a lane whose acked messages left tombstones in RocksDB (ARCHITECTURE.md
# "Write path" step 7, scan hints).
#
#   tests/bench/receive_cycle.sh [--seconds S] [--clients N] [--port P] [--perf FILE]
#
# Prints the bench's result line (cycles/s and p50/p99 per cycle, microseconds). --perf FILE
# also records the leader with `perf record --call-graph dwarf` for the run's measured
# seconds (perf report -i FILE). KEYLOADD=PATH runs another build of the daemon (A/B, e.g.
# under farm-bench --vs). Ports P..P+2 (clients) and P+100..P+102 (peers), default 16400;
# every member is stopped by pid on exit, its data removed.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=20 clients=8 port=16400 perf_out=""
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) secs=$2; shift ;;
    --clients) clients=$2; shift ;;
    --port) port=$2; shift ;;
    --perf) perf_out=$2; shift ;;
    *) echo "receive_cycle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
daemon=${KEYLOADD:-$root/bin/keyloadd} bench=$root/bin/keyload-bench
mkdir -p "$root/var"
d=$(mktemp -d "$root/var/rcycle-XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null
  done
  rm -rf "$d"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$daemon" keygen --cluster-secret-out "$d/cluster.secret" >/dev/null || exit 2
python3 - "$root/deploy/local-rf3.json" "$d" "$port" <<'EOF' || exit 2
import json, sys
src, d, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open(src))
c["cluster"] = "rcycle"
c["insecure_local_admin"] = True
p0 = [p for p in c["partitions"] if p["id"] == 0][0]
c["partitions"] = [p0]
for i, m in enumerate(p0["members"]):
    m["client"] = "tcp://127.0.0.1:%d" % (port + i)
    m["peer"] = "tcp://127.0.0.1:%d" % (port + 100 + i)
    m["data"] = "%s/p0m%d" % (d, m["id"])
    m.pop("public_key", None)
    m.pop("metrics", None)
json.dump(c, open(d + "/cluster.json", "w"), indent=2)
EOF
for n in p0m1 p0m2 p0m3; do
  "$daemon" --cluster "$d/cluster.json" --node "$n" --cluster-secret "$d/cluster.secret" --init-store \
    2>"$d/$n.log" &
  pids+=($!)
done
urls="tcp://127.0.0.1:$port,tcp://127.0.0.1:$((port + 1)),tcp://127.0.0.1:$((port + 2))"
ldr=$(timeout 70 "$bench" --leader-of "$urls") || { echo "receive_cycle: no serving leader"; tail -n 5 "$d"/*.log; exit 1; }
echo "receive_cycle: $ldr"
lnode=$(sed -n 's/.*node=p0m\([0-9]\).*/\1/p' <<<"$ldr")
lpid=${pids[$((lnode - 1))]}
if [ -n "$perf_out" ]; then
  # starts recording after the bench's warm-up (2 s) and stops before its end
  (sleep 3; exec perf record -q -F 499 --call-graph dwarf,16384 -p "$lpid" -o "$perf_out" -- sleep $((secs - 4))) >"$d/perf.log" 2>&1 &
  perf_pid=$!
fi
timeout $((secs + 60)) "$bench" --url "$urls" --cycle --clients "$clients" --seconds "$secs" --warmup 2 \
  --queue rcycle
rc=$?
[ -n "$perf_out" ] && { wait "$perf_pid"; cat "$d/perf.log"; }
exit $rc
