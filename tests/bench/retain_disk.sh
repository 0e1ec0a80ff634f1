#!/usr/bin/env bash
# retain_disk.sh: disk per member of a 3-member partition (replica_count 3) after N
# enqueue + receive + ack cycles of 100-byte messages, ending with an empty queue.
#
#   tests/bench/retain_disk.sh [--keyloadd BIN] [--cycles N] [--clients C]
#                              [--retention-ms MS] [--snapshot-threshold N]
#                              [--snapshot-trailing N] [--work DIR]
#
# Starts three members of BIN (default bin/keyloadd) under insecure_local_admin, measures
# `du` of each member's data directory after setup, runs `keyload-bench --cycle --ops N`
# (each cycle: an enqueue, a Receive of it, its Ack, three batches of one message or token
# each, like a real consumer) with C clients (default 128: each a thread with its own
# connection and lane, one request in flight; 128 reached 900 cycles/s on the shared 2-core
# machine, so 10^6 cycles take about 20 minutes; 256 were no faster), and with
# --retention-ms (timers.outcome_retention_ms; left out of the cluster file otherwise, so an
# older binary runs unchanged) waits until the horizon has passed; every run then does 300
# more cycles, whose entries sweep the expired outcomes (sweeps ride on writes); the
# growth per cycle counts them. --snapshot-threshold/--snapshot-trailing write the cluster
# file's "snapshot" policy (log compaction; left out otherwise: the binary's defaults).
# Before stopping, du of every running member is printed too (no flush, no manual
# compaction: what an operator sees), with the size of a fresh member (after setup), the
# number of compactions each member logged, and the target of ARCHITECTURE.md "Snapshots
# and log compaction" (growth of a running member over its fresh size at most 64 MiB:
# PASS/MISS; it does not fail the run). The cycle rate is printed after the cycles. Then it stops every
# member with SIGTERM (which flushes the applied state) and prints, per member: du before
# and after, the growth per cycle, and the store's census by key tag (build/store-census):
# log ('L') versus outcomes ('O' + 'E') versus the rest. Members are killed by pid on exit.
set -u
cd "$(dirname "$0")/../.."
daemon=$PWD/bin/keyloadd cycles=20000 clients=128 retention="" work="" sthreshold="" strailing=""
while [ $# -gt 0 ]; do
  case $1 in
    --keyloadd) daemon=$2; shift ;;
    --cycles) cycles=$2; shift ;;
    --clients) clients=$2; shift ;;
    --retention-ms) retention=$2; shift ;;
    --snapshot-threshold) sthreshold=$2; shift ;;
    --snapshot-trailing) strailing=$2; shift ;;
    --work) work=$2; shift ;;
    *) echo "retain_disk: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
bench=$PWD/bin/keyload-bench census=$PWD/build/store-census
for b in "$daemon" "$bench" "$census"; do
  [ -x "$b" ] || { echo "retain_disk: $b missing (make all build/store-census)" >&2; exit 2; }
done
work=${work:-$(mktemp -d /tmp/kl-retain-disk.XXXXXX)}
mkdir -p "$work"
pids=() dogs=()
# A watchdog's sleep is its child: killed by parent pid first, or it outlives the run.
cleanup() {
  for p in "${dogs[@]}"; do pkill -9 -P "$p" 2>/dev/null; done
  for p in "${pids[@]}" "${dogs[@]}"; do kill -9 "$p" 2>/dev/null; done
}
trap cleanup EXIT

base=$((11000 + ($$ % 90) * 10))   # below the ephemeral range; clients base..base+2, peers base+5..base+7
timers='"tick_ms":50,"election_ms":2000,"heartbeat_ms":300'
[ -n "$retention" ] && timers="$timers,\"outcome_retention_ms\":$retention"
urls=()
{
  printf '{"cluster":"rdisk","replica_count":3,"insecure_local_admin":true,"timers":{%s},' "$timers"
  if [ -n "$sthreshold" ]; then
    printf '"snapshot":{"threshold_entries":%d%s},' "$sthreshold" "${strailing:+,\"trailing_entries\":$strailing}"
  fi
  printf '"partitions":[{"id":0,"members":['
  for i in 1 2 3; do
    [ "$i" -gt 1 ] && printf ','
    printf '{"id":%d,"client":"tcp://127.0.0.1:%d","peer":"tcp://127.0.0.1:%d","data":"%s/m%d"}' \
      "$i" $((base + i - 1)) $((base + 4 + i)) "$work" "$i"
    urls+=("tcp://127.0.0.1:$((base + i - 1))")
  done
  printf ']}]}\n'
} > "$work/cluster.json"
"$daemon" keygen --cluster-secret-out "$work/cluster.secret" >/dev/null || exit 2
# keyloadd itself is the child, so kill -9 by pid at exit reaches it (a timeout wrapper
# left it running); a watchdog bounds its lifetime.
start() {
  "$daemon" --cluster "$work/cluster.json" --node "p0m$1" --cluster-secret "$work/cluster.secret" \
    --init-store 2>>"$work/m$1.log" &
  pids[$1]=$!
  ( sleep 7200; kill -9 "${pids[$1]}" 2>/dev/null ) &
  dogs+=($!)
}
for i in 1 2 3; do start "$i"; done
all=$(IFS=,; echo "${urls[*]}")
"$bench" --leader-of "$all" >/dev/null || { echo "retain_disk: no leader"; exit 1; }
# Setup (database, queue) and one cycle, then the fresh size.
"$bench" --url "$all" --cycle --clients 1 --ops 1 --queue rd >/dev/null 2>"$work/setup.log" ||
  { echo "retain_disk: setup failed"; tail -n 5 "$work/setup.log"; exit 1; }
"$bench" --wait-caught-up "$all" >/dev/null
sync
for i in 1 2 3; do before[$i]=$(du -sb "$work/m$i" | cut -f1); done
t0=$(date +%s)
"$bench" --url "$all" --cycle --clients "$clients" --ops "$cycles" --queue rd --timeout-ms 20000 2>"$work/bench.log" |
  tee "$work/bench.out"
t1=$(date +%s)
echo "retain_disk: cycles=$cycles run_s=$((t1 - t0)) cycles_per_s=$((cycles / (t1 - t0 > 0 ? t1 - t0 : 1)))"
# 300 more cycles in every run (so runs with and without retention compare): after the
# horizon has passed when there is one, so that their entries sweep what expired.
trailing=300
[ -n "$retention" ] && sleep $(( (retention + 999) / 1000 + 2 ))
"$bench" --url "$all" --cycle --clients "$clients" --ops "$trailing" --queue rd >/dev/null 2>>"$work/bench.log"
"$bench" --wait-caught-up "$all" >/dev/null
sync
for i in 1 2 3; do
  now=$(du -sb "$work/m$i" | cut -f1)
  grown=$((now - before[i]))
  verdict=PASS
  [ "$grown" -gt $((64 << 20)) ] && verdict=MISS
  echo "member m$i running: du_fresh=${before[$i]} du_now=$now growth=$grown" \
    "compactions=$(grep -c 'log compacted' "$work/m$i.log") target_growth<=64MiB=$verdict"
done
for i in 1 2 3; do kill -TERM "${pids[$i]}"; done
for i in 1 2 3; do wait "${pids[$i]}" 2>/dev/null; done
pids=()
sync
echo "retain_disk: keyloadd=$daemon cycles=$cycles+$trailing clients=$clients retention_ms=${retention:-unset}" \
  "snapshot_threshold=${sthreshold:-default} snapshot_trailing=${strailing:-default} run_s=$((t1 - t0))"
for i in 1 2 3; do
  after=$(du -sb "$work/m$i" | cut -f1)
  growth=$((after - before[i]))
  echo "member m$i: du_before=${before[$i]} du_after=$after growth=$growth per_cycle=$((growth / (cycles + trailing)))"
  "$census" "$work/m$i" | sed 's/^/  /'
done
