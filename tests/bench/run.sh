#!/usr/bin/env bash
# run.sh: `make bench`. Starts one throw-away keyloadd (single replica) on its own port and
# data directory under var/, measures this disk's fsync (one 4 KiB append + fdatasync, and
# three 4 KiB writes over zero-filled files at once, as the journal writes, until all three
# are synced: the floor of an RF3
# commit whose members share this disk), runs the enqueue matrix
# (batch size 1 and 100 x 1 and 32 clients), prints a table and the two targets:
#   (a) throughput of 32 single-message clients / 1 client        target >= 5x
#       (group commit: concurrent batches must share one synced append)
#   (b) 1-client median enqueue latency / median fsync             target <  2x
#       (a lone durable enqueue should cost about one fsync, not several)
# Then the same matrix on an RF3 cluster (3 members of partition 0, replica_count 3: every
# commit fsynced by all three before it is acknowledged), and failover on a cluster with
# replica_count 2 of 3: kill -9 of the leader while a writer sends single-message batches,
# measured from the kill to the first write acknowledged afterwards, BENCH_FAILOVER_RUNS
# times (the killed member is restarted and caught up between runs). Both clusters come from
# deploy/local-rf3.json (its timers, partition 0 only) with bench-only ports and data dirs.
#   (c) RF3 throughput, 32 clients batch 1 / single daemon's same cell  target >= 50%
#   (d) median failover (kill -9 of the leader to first acked write)    target <  1.5 s
# Then KL-3, sessions and authorization, on clusters that require sessions (no
# insecure_local_admin; member key pairs from `keyloadd keygen`, public keys in the cluster
# file, --member-key per member). On an RF3 cluster (as above) an administrator is
# bootstrapped and, through the CLI, makes queue kl3 and a principal with no role and a
# QueuePublish grant on it (so every request goes through the grant evaluator); the enqueue
# matrix then runs as that principal through the SDK, every request sealed, and the leader's
# MemberStatus cost counters (loop-thread time spent opening/sealing requests and loading
# the principal and evaluating grants) before and after each cell give the session +
# authorization time per request. Then one member alone: daemon CPU per Hello, from its own
# counter (hello_ns/hellos) and from the process's CPU time over N Hellos minus N
# MemberStatus calls (the cost of any RPC on nng).
#   (KL-3 a) session+authz time / median request time, 1 client batch 1  target <  5%
#   (KL-3 b) daemon CPU per handshake (process CPU, make's -O2 build)    target <  200 us
# Then KL-4, remote transfers end to end, on an RF3 cluster of 3 partitions x 3 members
# (deploy/local-rf3.json's layout and limits, sessions required, bench-only ports and data):
# a persisted database administrator benchxfer with QueuePublish and QueueInspect on every
# queue of bench/kl4 runs Create (source queue xsrc on partition 1) -> Accept (destination
# xdst on partition 2) -> InspectQueueTransferReceipt -> Complete per transfer, 1 and 32
# transfers in flight (1: one client thread, one transfer at a time; 32: one client thread
# with 32 transfers outstanding through the SDK's asynchronous calls, as the 64-in-flight
# enqueue cell, or with BENCH_XFER_THREADS=1 32 client threads of one transfer each; every
# transfer has its own lanes: every lane retains its transfer records forever, up to MaxScanRecords records and MaxBatchBytes
# bytes, so a client moves to a fresh lane every 200 transfers); latency is Create sent to
# Delivered answered. Then, on the same cluster as the same principal, single-message
# enqueues into xenq (partition 1) with 32 in flight.
#   (KL-4) transfers/s / enqueue msgs/s, 32 in flight                     target >= 25%
# Then KL-5, the coordinator, on the same cluster right after KL-4 (BENCH_PARTS=coord runs
# KL-4 and then this): benchxfer (granted QueueConsume and QueueAck too) is the coordinator's
# principal. Per cell (flush_interval_ms 100, the default, and 1; workers 1, 4, 16, 32) one
# bin/keyload-coordinator is started with that config (other keys at their defaults), then
# keyload-bench --coord-create makes N transfers with 32 client threads as fast as it can
# (a fresh source queue per cell on partition 1, destination cdst on partition 2, a new lane
# every 200 transfers), waits until the source lists nothing pending and reads every
# transfer's history: rate = delivered / (last ReceiptVerified - first IntentCreated commit
# time), latency = ReceiptVerified - IntentCreated per transfer (all N are created at once,
# so latency includes the wait behind the backlog and the discovery interval, 500 ms; at 32
# workers the same coordinator then also gets 20 creates/s for BENCH_SECONDS on another
# queue: latency without a backlog). N is
# about BENCH_SECONDS of work at the rate the cell can reach (workers x turns per second,
# at most 500/s), so every cell takes a few seconds. The coordinator is stopped (SIGTERM)
# after each cell. Then memory: 10,000 intents are created on 50 lanes of queue crss with no
# coordinator running; a coordinator with the default config (256 workers x 32 buffered
# events) starts, and once its status snapshot shows its buffers full (or after 30 s) its
# VmHWM is read from /proc, then it is stopped.
#   (KL-5 a) coordinator transfers/s at 32 workers / KL-4 client-driven transfers/s at 32 in
#            flight (same run)                                            target >= 80%
#   (KL-5 b) coordinator VmHWM with 10,000 pending                        target <  64 MiB
# Then KL-9, the peers (BENCH_PARTS=peers runs only this; `make peers`), each comparison the
# median of three alternating runs (KeyLoad, peer, KeyLoad, peer, ...), all three printed:
# a sealed RF3 cluster as in KL-3 (principal benchpub) against NATS JetStream R3 (three local
# nats-server processes, file storage, stream BENCH with 3 replicas; tests/bench/peers/js.mjs
# with the pinned npm client): 1 client / 1 synchronous publisher (p50) and 64 in flight from
# one client each (KeyLoad: keyload-bench --in-flight 64; msgs/s, p99, user+sys CPU of the
# three members / three servers per acknowledged message), and, informational, KeyLoad with
# 64 client threads of one blocking call each;
# JetStream sourcing (stream COPY sourcing BENCH) once, informational; the idle long-poll
# (log entries the leader appends during a 10 s `keyload receive --wait-ms 10000` on an
# empty queue; only when the CLI has --wait-ms). Then the KL-4 transfers at 1 and 32 in
# flight alternate with a PostgreSQL 15 outbox (a private cluster under var/bench/pg, unix
# socket only, fsync and synchronous_commit on; tests/bench/peers/pg.mjs: three commits per
# transfer) at 1 and 8 clients, and a coordinator with the default config drives transfers
# created by 32 clients. Prints every KL-9 target as a ratio with PASS/MISS, writes
# var/bench/summary.json (jq), the raw latencies (us, one a line) under var/bench/lat/ and
# var/bench/latency.png (gnuplot: percentile curves of KeyLoad and its peer per cell).
# It also prints the 3-copy fsync floor (one probe before each round's RF3 1-client cell, on
# the members' disk with them idle, the middle one counts; fsync3_p50_us and fsync3_p99_us
# in summary.json) and how far the RF3 1-client p50 lies above it, and the cost of a thread
# waking another on another CPU and on the same one (keyload-bench --wake-probe, once after
# the rounds; wake_cross_cpu_p50_us and wake_same_cpu_p50_us in summary.json), and the machine
# (CPU model, CPU count, kernel; `machine` in summary.json), since the ratios move with it.
# Last in the part, a diagnostic: the RF3 1-client cell (three runs, the median kept) on a
# second cluster whose stores are on tmpfs (/dev/shm: fdatasync costs nothing there, and
# nothing is durable), so the 1-client p50 splits into the path without the disk and what the
# three synced copies add (rf3_nodisk_1c_p50_us in summary.json; skipped where /dev/shm has
# under 256 MiB free). It is not a KeyLoad configuration and no target is judged on it.
# Then KL-10: disk per member after 10^6 cycles (BENCH_PARTS=retain, retain_disk.sh), and
# the large state (BENCH_PARTS=big): a 1 GiB snapshot install (snap_install.sh: time and
# both peak RSS, target each < 128 MiB), the write outage of a 3-of-3 partition whose member
# died, from `keyload-cluster replace` to the first acknowledged write with 1 GiB of state
# (replace_big.sh, target <= 10 s), and a restart with 10^6 pending messages, exec to
# serving for a follower, the leader and the whole partition (restart_pending.sh, <= 5 s).
# Targets are reported PASS/MISS; they do not fail the run. The script fails only when a
# daemon cannot be started or a benchmark cannot run.
# Environment: BENCH_SECONDS (per cell, default 5), BENCH_PORT (default 7491),
#              BENCH_RF3_PORT (first client port of the RF3 cluster, default 7611; peers +100),
#              BENCH_FAILOVER_PORT (same for the failover cluster, default 7621),
#              BENCH_FAILOVER_RUNS (default 5),
#              BENCH_KL3_PORT (first client port of the KL-3 RF3 cluster, default 18011; peers
#              +100), BENCH_HANDSHAKE_PORT (its one-member cluster, default 18001; peer +100),
#              BENCH_HANDSHAKES (Hellos measured, default 1000),
#              BENCH_XFER_PORT (first client port of the KL-4 cluster, default 18100: clients
#              +0..8, peers +50..58),
#              BENCH_PEERS_PORT (first client port of the peers' sealed RF3 cluster, default
#              18031; peers +100; the no-disk cluster uses it +10), BENCH_JS_PORT
#              (JetStream clients, default 14222..14224, routes +10),
#              BENCH_PARTS=kl3, xfer, coord, peers, retain or big runs only the KL-3 part, the
#              KL-4 part, the KL-4 and KL-5 parts, the KL-9 peers part, the KL-10 disk part or
#              the KL-10 large-state part (default: everything); xcoord runs only the two cells of the coordinator
#              target, BENCH_ROUNDS times alternating (client-driven, 32 in flight; a
#              coordinator with the default config),
#              BENCH_XCOORD_CELLS (xcoord's client-driven in-flight counts, default 32, e.g.
#              "16 32 64 128" for the throughput-latency curve; the coordinator cell follows
#              each cell of 32 only),
#              BENCH_XFER_THREADS=1 (the KL-4 32-in-flight cell as 32 client threads of one
#              blocking transfer each instead of one client with 32 outstanding; the peers
#              part prints that form once anyway, informational),
#              BENCH_RETAIN_CYCLES (KL-10 disk part, default 1000000: about 20 minutes),
#              BENCH_BIG_MIB (KL-10 large-state part: the state of the snapshot install and
#              of the replace, default 1024; about 6 minutes and 5 GiB of disk in all),
#              BENCH_BIG_MESSAGES (its pending messages for the restart, default 1000000),
#              BENCH_BIN (a directory holding another build's binaries, for A/B runs),
#              BENCH_COORD_WORKERS (that cell's coordinator with this many workers instead
#              of the default config),
#              BENCH_CLI (the CLI to use, default bin/keyload),
#              BENCH_KEEP=1 keeps the temporary directory (daemon logs, data) for inspection,
#              BENCH_TRACE=N (the clusters' members run with keyloadd --repl-trace N, and each
#              client-driven transfer cell is followed by tests/bench/repl_trace.sh's legs
#              between the members of partitions 1 and 2).
# Every process this script starts is tracked by pid and stopped by pid on exit.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
secs=${BENCH_SECONDS:-5}
port=${BENCH_PORT:-7491}
url="tcp://127.0.0.1:$port"
rf3_port=${BENCH_RF3_PORT:-7611}
fo_port=${BENCH_FAILOVER_PORT:-7621}
fo_runs=${BENCH_FAILOVER_RUNS:-5}
kl3_port=${BENCH_KL3_PORT:-18011}
hs_port=${BENCH_HANDSHAKE_PORT:-18001}
hs_n=${BENCH_HANDSHAKES:-1000}
parts=${BENCH_PARTS:-all}
xfer_port=${BENCH_XFER_PORT:-18100}
trace_opt=()
if [ -n "${BENCH_TRACE:-}" ]; then
  case $BENCH_TRACE in ''|*[!0-9]*) echo "bench: BENCH_TRACE must be a number of log indexes"; exit 2 ;; esac
  trace_opt=(--repl-trace "$BENCH_TRACE")
fi
case $parts in all|kl3|xfer|coord|peers|xcoord|retain|big) ;; *) echo "bench: BENCH_PARTS must be all, kl3, xfer, coord, peers, xcoord, retain or big"; exit 2 ;; esac
for c in ${BENCH_XCOORD_CELLS:-32}; do
  case $c in ''|*[!0-9]*|0*) echo "bench: BENCH_XCOORD_CELLS must be in-flight counts from 1 to 1024 (\"$c\")"; exit 2 ;; esac
  [ "$c" -le 1024 ] || { echo "bench: BENCH_XCOORD_CELLS must be in-flight counts from 1 to 1024 (\"$c\")"; exit 2; }
done
peers_port=${BENCH_PEERS_PORT:-18031}
js_port=${BENCH_JS_PORT:-14222}
want_peers=0
{ [ "$parts" = all ] || [ "$parts" = peers ]; } && want_peers=1
bench_t0=$(date +%s)
bin=${BENCH_BIN:-bin}
bench=$bin/keyload-bench
daemon=$bin/keyloadd
cli=${BENCH_CLI:-$bin/keyload}  # BENCH_CLI: another build of the CLI (e.g. one with receive --wait-ms)
coordinator=$bin/keyload-coordinator
for b in "$bench" "$daemon" "$cli" "$coordinator"; do
  [ -x "$b" ] || { echo "bench: $b is missing; run make first"; exit 2; }
done

mkdir -p var
tmp=$(mktemp -d "$root/var/bench-XXXXXX")
# Run private copies: a `make` elsewhere in the tree must not swap binaries under a restart.
mkdir -p "$tmp/bin"
cp "$bench" "$daemon" "$coordinator" "$tmp/bin/" && cp "$cli" "$tmp/bin/keyload" || exit 2
bench=$tmp/bin/keyload-bench
daemon=$tmp/bin/keyloadd
cli=$tmp/bin/keyload
coordinator=$tmp/bin/keyload-coordinator
pid=""
cpid=""           # the keyload-coordinator we started (KL-5), if one runs
declare -A mpid   # cluster member "DIR NODE" -> pid of the keyloadd we started
# Stops one keyloadd we started: SIGTERM, up to 10 s, then SIGKILL; reaps it.
stop_pid() {
  local p=$1 what=$2
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      echo "bench: $what (pid $p) ignored SIGTERM for 10 s; killing it"
      kill -KILL "$p" 2>/dev/null
    fi
  fi
  [ -n "$p" ] && { wait "$p"; } 2>/dev/null
}
stop_cluster() {  # DIR: every member of that cluster we started
  local k
  for k in "${!mpid[@]}"; do
    [ "${k%% *}" = "$1" ] || continue
    stop_pid "${mpid[$k]}" "keyloadd ${k##* }"
    unset "mpid[$k]"
  done
}
cleanup() {
  declare -F js_down >/dev/null && js_down
  declare -F pg_down >/dev/null && pg_down
  stop_pid "$cpid" keyload-coordinator
  cpid=""
  stop_pid "$pid" keyloadd
  pid=""
  local k
  for k in "${!mpid[@]}"; do stop_pid "${mpid[$k]}" "keyloadd ${k##* }"; done
  mpid=()
  [ -n "${nodisk_dir:-}" ] && rm -rf "$nodisk_dir"  # tmpfs: never kept
  if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "bench: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Cluster file: deploy/local-1.json with our port and data directory.
python3 - "$root/deploy/local-1.json" "$tmp/cluster.json" "$port" "$tmp/data" <<'EOF' || exit 2
import json, sys
src, dst, port, data = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = json.load(open(src))
c["cluster"] = "bench"
c["insecure_local_admin"] = True  # the KL-1/KL-2 matrix runs without sessions
m = c["partitions"][0]["members"][0]
m["client"] = "tcp://127.0.0.1:%d" % port
m["peer"] = "tcp://127.0.0.1:%d" % (port + 100)
m["data"] = data
json.dump(c, open(dst, "w"), indent=2)
EOF

log="$tmp/keyloadd.log"
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
# Databases need a cluster secret (their signing keys derive from it).
"$daemon" keygen --cluster-secret-out "$tmp/cluster.secret" >/dev/null || exit 2
declare -A line rline
failed=0
# fsync3_once DIR: the floor of a commit synced on three copies that share one disk, as an
# RF3 cell's members do here: three threads each write 4 KiB over zeros in their own file in
# DIR (as the store's journal writes) and fdatasync() it, all at once, until the last is done; 200 rounds. The file system is
# synced first, so writeback of earlier work (the binaries copied, a cluster's setup) does
# not queue ahead of the probe's flushes. fsync3_pick: of the probes so far, the middle one
# (by median) counts; sets fsync3_med and fsync3_p99 (us).
fsync3_med=""
fsync3_p99=""
fsync3_runs=()
fsync3_once() {
  local p
  sync -f "$1" 2>/dev/null
  p=$("$bench" --fsync-probe "$1" --fsync-copies 3) || { echo "bench: 3-copy fsync probe failed"; exit 1; }
  echo "$p"
  fsync3_runs+=("$(kv median_us "$p") $(kv p99_us "$p")")
}
fsync3_pick() {
  [ ${#fsync3_runs[@]} -gt 0 ] || return 0
  read -r fsync3_med fsync3_p99 < <(probe_middle "${fsync3_runs[@]}")
}
# probe_middle "MEDIAN P99"...: the probe whose median is the middle one (fsync on a VM
# disk is noisy, so a probe's figure is the middle of several).
probe_middle() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
crashes=()
if [ "$parts" = all ]; then  # ---- KL-1/KL-2: one daemon (BENCH_PARTS=kl3 skips to KL-3) ----
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "bench: port $port is already in use; set BENCH_PORT"
  exit 2
fi

"$daemon" --cluster "$tmp/cluster.json" --node p0m1 --data "$tmp/data" --cluster-secret "$tmp/cluster.secret" --init-store 2>"$log" &
pid=$!
ready=0
for _ in $(seq 1 200); do
  if grep -q 'msg="ready"' "$log" 2>/dev/null; then ready=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ $ready -ne 1 ]; then
  echo "bench: keyloadd did not become ready within 20 s; its log:"
  tail -n 30 "$log"
  exit 1
fi
echo "bench: keyloadd pid $pid ready on $url (data $tmp/data)"

# fsync on a VM disk is noisy: three probes of 200 samples, the middle one (by median) counts.
probes=()
for i in 1 2 3; do
  p=$("$bench" --fsync-probe "$tmp/data") || { echo "bench: fsync probe failed"; exit 1; }
  echo "$p"
  probes+=("$(kv median_us "$p") $(kv p99_us "$p")")
done
read -r fsync_med fsync_p99 < <(probe_middle "${probes[@]}")
for _ in 1 2 3; do fsync3_once "$tmp/data"; done
fsync3_pick

# RPC floor: a QueueStats read, no log append and no fsync, through the same client path.
rd=$("$bench" --url "$url" --read --clients 1 --seconds 2) || failed=1
echo "$rd"
for b in 1 100; do
  for c in 1 32; do
    out=$("$bench" --url "$url" --clients "$c" --batch-size "$b" --seconds "$secs")
    rc=$?
    echo "${out:-bench: clients=$c batch=$b: no result (exit $rc)}"
    [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
    line[$b,$c]=$out
    kill -0 "$pid" 2>/dev/null || { echo "bench: keyloadd died; its log:"; tail -n 30 "$log"; pid=""; exit 1; }
  done
done
stop_pid "$pid" keyloadd   # free the cores for the clusters
pid=""
fi  # KL-1/KL-2: one daemon

# ---- clusters: 3 members of partition 0 of deploy/local-rf3.json ----

# make_cluster DIR NAME REPLICA_COUNT CLIENT_PORT: DIR/cluster.json with members p0m1..p0m3
# on CLIENT_PORT+i (peers +100), data under DIR; partitions 1 and 2 are left out so that no
# client tries them. Timers and limits stay those of local-rf3.json.
# make_cluster DIR NAME REPLICA_COUNT CLIENT_PORT sealed [MEMBERS]: sessions required (KL-3):
# each member's public key from DIR/p0mM.pub (kl3_keys), only the first MEMBERS members.
make_cluster() {
  mkdir -p "$1/pids"
  python3 - "$root/deploy/local-rf3.json" "$1" "$2" "$3" "$4" "${5:-}" "${6:-0}" <<'EOF2' || exit 2
import json, sys
src, d, name, rc, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sealed, keep = sys.argv[6] == "sealed", int(sys.argv[7])
c = json.load(open(src))
c["cluster"] = name
c["replica_count"] = rc
c["insecure_local_admin"] = not sealed  # the KL-1/KL-2 matrix runs without sessions
p0 = [p for p in c["partitions"] if p["id"] == 0][0]
c["partitions"] = [p0]
if keep:
    p0["members"] = p0["members"][:keep]
for i, m in enumerate(p0["members"]):
    m["client"] = "tcp://127.0.0.1:%d" % (port + i)
    m["peer"] = "tcp://127.0.0.1:%d" % (port + 100 + i)
    m["data"] = "%s/p0m%d" % (d, m["id"])
    m.pop("metrics", None)  # the seeds' metrics ports may be held by another cluster here
    m.pop("public_key", None)  # KL-1/KL-2 members run without member keys
    if sealed:
        m["public_key"] = open("%s/p0m%d.pub" % (d, m["id"])).read().strip()
json.dump(c, open(d + "/cluster.json", "w"), indent=2)
t = c.get("timers", {})
print("tick_ms=%s election_ms=%s heartbeat_ms=%s" % (t.get("tick_ms"), t.get("election_ms"), t.get("heartbeat_ms")))
EOF2
}
cluster_urls() {  # CLIENT_PORT -> URL,URL,URL
  echo "tcp://127.0.0.1:$1,tcp://127.0.0.1:$(($1 + 1)),tcp://127.0.0.1:$(($1 + 2))"
}
ports_free() {  # CLIENT_PORT: the three client and three peer ports
  local p
  for p in $1 $(($1 + 1)) $(($1 + 2)) $(($1 + 100)) $(($1 + 101)) $(($1 + 102)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "bench: port $p is already in use; set BENCH_RF3_PORT / BENCH_FAILOVER_PORT / BENCH_KL3_PORT / BENCH_HANDSHAKE_PORT"
      return 1
    fi
  done
}
# start_member DIR NODE: starts it (log appended to DIR/NODE.log, pid in DIR/pids/NODE.pid)
# and waits up to 20 s for one more msg="ready" in its log. Not in a subshell: the pid must
# stay our child.
start_member() {
  local d=$1 n=$2 before p
  before=$(grep -c 'msg="ready"' "$d/$n.log" 2>/dev/null)
  before=${before:-0}
  local key=()   # KL-3 clusters: the member's key pair (kl3_keys)
  [ -f "$d/$n.key" ] && key=(--member-key "$d/$n.key")
  "$daemon" --cluster "$d/cluster.json" --node "$n" --data "$d/$n" --cluster-secret "$tmp/cluster.secret" --init-store "${key[@]}" "${trace_opt[@]}" 2>>"$d/$n.log" &
  p=$!
  mpid["$d $n"]=$p
  echo "$p" >"$d/pids/$n.pid"
  for _ in $(seq 1 200); do
    [ "$(grep -c 'msg="ready"' "$d/$n.log" 2>/dev/null)" -gt "$before" ] && return 0
    kill -0 "$p" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench: keyloadd $n ($d) did not become ready within 20 s; its log:"
  tail -n 30 "$d/$n.log"
  exit 1
}
members_alive() {  # DIR: every member we started there still runs
  local k
  for k in "${!mpid[@]}"; do
    [ "${k%% *}" = "$1" ] || continue
    if ! kill -0 "${mpid[$k]}" 2>/dev/null; then
      echo "bench: keyloadd ${k##* } died; its log:"
      tail -n 30 "$1/${k##* }.log"
      return 1
    fi
  done
}

if [ "$parts" = all ]; then  # ---- KL-1/KL-2: RF3 matrix and failover ----
# ---- RF3: replica_count 3, the same matrix ----
rf3=$tmp/rf3
ports_free "$rf3_port" || exit 2
rf3_timers=$(make_cluster "$rf3" bench-rf3 3 "$rf3_port") || exit 2
rf3_urls=$(cluster_urls "$rf3_port")
for n in p0m1 p0m2 p0m3; do start_member "$rf3" "$n"; done
ldr=$("$bench" --leader-of "$rf3_urls") || { echo "bench: RF3 cluster elected no serving leader"; exit 1; }
echo "bench: RF3 cluster ready ($rf3_timers); $ldr"
echo "bench: RF3 matrix (--url $rf3_urls)"
for b in 1 100; do
  for c in 1 32; do
    out=$("$bench" --url "$rf3_urls" --clients "$c" --batch-size "$b" --seconds "$secs")
    rc=$?
    echo "${out:-bench: rf3 clients=$c batch=$b: no result (exit $rc)}"
    [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
    rline[$b,$c]=$out
    members_alive "$rf3" || exit 1
  done
done
# These members run without member keys on purpose (the KL-1/KL-2 matrix), so each says once
# that its replication links are unauthenticated: expected, not counted.
rf3_warn=$(cat "$rf3"/p0m*.log | grep 'level=\(warn\|error\)' | grep -vc 'replication links are unauthenticated')
rf3_warn_first=$(cat "$rf3"/p0m*.log | grep 'level=\(warn\|error\)' | grep -v 'replication links are unauthenticated' | head -n 5)
stop_cluster "$rf3"

# ---- failover: replica_count 2 of 3, kill -9 of the leader ----
fo=$tmp/failover
ports_free "$fo_port" || exit 2
fo_timers=$(make_cluster "$fo" bench-failover 2 "$fo_port") || exit 2
fo_urls=$(cluster_urls "$fo_port")
for n in p0m1 p0m2 p0m3; do start_member "$fo" "$n"; done
"$bench" --leader-of "$fo_urls" >/dev/null || { echo "bench: failover cluster elected no serving leader"; exit 1; }
echo "bench: failover cluster ready ($fo_timers)"
fo_lines=()
fo_ms=()
# A member that exits by itself (our kill -9 aside) is a daemon bug, not a bench failure:
# keep the cluster's logs and data under var/bench-crash-*, then bring the member back with
# an empty data directory (it catches up from the leader's log, which is never truncated),
# so the remaining runs still measure failover. The run still ends with a failing status.
revive_dead() {  # DIR WHEN; 0 when a member had to be revived
  local d=$1 k n keep revived=1
  for k in "${!mpid[@]}"; do
    [ "${k%% *}" = "$d" ] || continue
    kill -0 "${mpid[$k]}" 2>/dev/null && continue
    n=${k##* }
    { wait "${mpid[$k]}"; } 2>/dev/null
    keep=$(mktemp -d "$root/var/bench-crash-XXXXXX")
    cp -r "$d" "$keep/" 2>/dev/null
    echo "bench: keyloadd $n exited by itself $2 (a daemon bug); logs and data kept in $keep; its errors:"
    grep 'level=error' "$d/$n.log" | tail -n 5
    crashes+=("$n $2: $(grep 'level=error' "$d/$n.log" | head -n 1 | sed 's/^.*msg=//') (kept in $keep)")
    failed=1
    rm -rf "${d:?}/$n"
    start_member "$d" "$n"
    revived=0
  done
  return $revived
}
for r in $(seq 1 "$fo_runs"); do
  if revive_dead "$fo" "before failover run $r"; then
    "$bench" --wait-caught-up "$fo_urls" || { echo "bench: the revived member did not catch up"; break; }
  fi
  # bash reports a killed background job ("... Killed ...") on its stderr after the next
  # command; the kill is the point here, so the shell's stderr is muted until the member has
  # been reaped (the bench's own stderr still goes out through fd 4).
  exec 4>&2 2>/dev/null
  out=$("$bench" --failover --url "$fo_urls" --pid-dir "$fo/pids" --run "$r" --queue failover 2>&4)
  rc=$?
  killed=$(kv killed "$out")
  [ -n "$killed" ] && [ -n "${mpid["$fo $killed"]:-}" ] && wait "${mpid["$fo $killed"]}"
  exec 2>&4 4>&-
  echo "${out:-bench: failover run $r: no result (exit $rc)}"
  cu=""
  if [ -n "$killed" ] && [ -n "${mpid["$fo $killed"]:-}" ]; then
    start_member "$fo" "$killed"
    if ! cu=$("$bench" --wait-caught-up "$fo_urls"); then
      sleep 1
      revive_dead "$fo" "after its restart in failover run $r" || { echo "bench: $killed did not catch up"; failed=1; break; }
      cu=$("$bench" --wait-caught-up "$fo_urls") || { echo "bench: the revived member did not catch up"; break; }
    fi
    echo "$cu"
  fi
  if [ $rc -ne 0 ] || [ -z "$out" ]; then failed=1; [ -n "$killed" ] || break; continue; fi
  fo_lines+=("$out caughtup_ms=$(kv ms "$cu")")
  fo_ms+=("$(kv failover_ms "$out")")
done
sleep 2   # a member that dies right after catching up
revive_dead "$fo" "after the last failover run"
stop_cluster "$fo"
fi  # KL-1/KL-2: RF3 matrix and failover

# ---- KL-3: sessions and authorization (sessions required, member keys) ----
# kl3_keys DIR NODE...: a member key pair per node, secret in DIR/NODE.key (0600, what
# --member-key reads), public key (base64) in DIR/NODE.pub (what make_cluster ... sealed puts
# in the cluster file).
kl3_keys() {
  local d=$1 n
  shift
  mkdir -p "$d"
  for n in "$@"; do
    "$daemon" keygen --secret-out "$d/$n.key" >"$d/$n.pub" || return 1
  done
}
kl3_cli() {  # DIR ARGS...: the CLI on DIR's cluster and database bench/kl3, bounded
  local d=$1
  shift
  timeout 60 "$cli" --cluster "$d/cluster.json" --database bench/kl3 --timeout 20000 "$@" >>"$d/setup.log" 2>&1
}
kl3_admin() {  # DIR ARGS...: the CLI as the administrator benchadmin (sealed)
  local d=$1
  shift
  kl3_cli "$d" --principal benchadmin --key "$d/admin.key" "$@"
}
# kl3_setup DIR [publisher]: bootstraps the cluster administrator benchadmin of bench/kl3
# (key in DIR/admin.key); with publisher also queue kl3 on partition 0 and the principal
# benchpub (no role, key in DIR/pub.key) with a QueuePublish grant on exactly kl3.
kl3_setup() {
  local d=$1
  kl3_cli "$d" admin bootstrap --tenant bench --database kl3 --admin benchadmin --key-out "$d/admin.key" \
    --cluster-secret "$tmp/cluster.secret" || { echo "bench: admin bootstrap failed:"; tail -n 5 "$d/setup.log"; return 1; }
  [ "${2:-}" = publisher ] || return 0
  kl3_admin "$d" queue create kl3 --partition 0 --max-messages 100000000 --max-bytes 107374182400 &&
    kl3_admin "$d" principal create benchpub --key-out "$d/pub.key" &&
    kl3_admin "$d" principal grant benchpub QueuePublish --queue kl3 ||
    { echo "bench: KL-3 setup (queue kl3, principal benchpub, its grant) failed:"; tail -n 5 "$d/setup.log"; return 1; }
}
declare -A kline
kl3_ok=0
hs_out=""
if [ "$parts" = xfer ] || [ "$parts" = coord ] || [ "$parts" = peers ] || [ "$parts" = xcoord ] || [ "$parts" = retain ] || [ "$parts" = big ]; then
  :  # KL-4 (and KL-5) or the peers only
elif ! "$cli" principal --help >/dev/null 2>&1; then
  echo "bench: $cli has no 'principal' command; the KL-3 part cannot run"
  failed=1
else
  kl3=$tmp/kl3
  ports_free "$kl3_port" || exit 2
  kl3_keys "$kl3" p0m1 p0m2 p0m3 || exit 2
  kl3_timers=$(make_cluster "$kl3" bench-kl3 3 "$kl3_port" sealed) || exit 2
  kl3_urls=$(cluster_urls "$kl3_port")
  for n in p0m1 p0m2 p0m3; do start_member "$kl3" "$n"; done
  ldr=$("$bench" --leader-of "$kl3_urls") || { echo "bench: KL-3 RF3 cluster elected no serving leader"; exit 1; }
  echo "bench: KL-3 RF3 cluster ready, sessions required ($kl3_timers); $ldr"
  if kl3_setup "$kl3" publisher; then
    kl3_ok=1
    echo "bench: KL-3 matrix as principal benchpub (QueuePublish on bench/kl3 queue kl3), sealed"
    for b in 1 100; do
      for c in 1 32; do
        out=$(timeout $((secs * 3 + 120)) "$bench" --cluster "$kl3/cluster.json" --principal benchpub \
              --key "$kl3/pub.key" --database bench/kl3 --queue kl3 --clients "$c" --batch-size "$b" --seconds "$secs")
        rc=$?
        echo "${out:-bench: kl3 clients=$c batch=$b: no result (exit $rc)}"
        [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
        kline[$b,$c]=$out
        members_alive "$kl3" || exit 1
      done
    done
  else
    failed=1
  fi
  kl3_warn=$(cat "$kl3"/p0m*.log | grep -c 'level=\(warn\|error\)')
  kl3_warn_first=$(cat "$kl3"/p0m*.log | grep 'level=\(warn\|error\)' | head -n 5)
  stop_cluster "$kl3"

  # Handshakes: one member alone (nothing else on its loop), sessions required.
  hs=$tmp/handshake
  ports_free "$hs_port" || exit 2
  kl3_keys "$hs" p0m1 || exit 2
  make_cluster "$hs" bench-handshake 1 "$hs_port" sealed 1 >/dev/null || exit 2
  start_member "$hs" p0m1
  "$bench" --leader-of "tcp://127.0.0.1:$hs_port" >/dev/null || { echo "bench: the handshake member does not serve"; exit 1; }
  if kl3_setup "$hs"; then
    hs_out=$(timeout 600 "$bench" --handshake "$hs_n" --cluster "$hs/cluster.json" --principal benchadmin \
             --key "$hs/admin.key" --pid "${mpid["$hs p0m1"]}")
    rc=$?
    echo "${hs_out:-bench: handshake: no result (exit $rc)}"
    [ $rc -eq 0 ] && [ -n "$hs_out" ] || failed=1
    members_alive "$hs" || exit 1
  else
    failed=1
  fi
  kl3_warn=$(( kl3_warn + $(grep -c 'level=\(warn\|error\)' "$hs/p0m1.log") ))
  stop_cluster "$hs"
fi

if [ "$parts" = all ]; then  # ---- KL-1/KL-2 summary ----

echo
echo "=== KeyLoad enqueue benchmark: 1 replica, ${secs}s per cell, 100-byte bodies ==="
printf "fsync (4 KiB append + fdatasync, %s): median %s us, p99 %s us\n" "$tmp/data" "$fsync_med" "$fsync_p99"
printf "fsync, 3 copies at once (three 4 KiB overwrites + fdatasync on one disk, all done): median %s us, p99 %s us\n" \
  "$fsync3_med" "$fsync3_p99"
printf "RPC floor (1 client, QueueStats read): p50 %s us, p99 %s us, %s reads/s\n" "$(kv p50_us "$rd")" \
  "$(kv p99_us "$rd")" "$(kv batches_per_s "$rd")"
printf "%-8s %-6s %12s %12s %10s %10s %8s\n" clients batch batches/s msgs/s p50_us p99_us errors
for b in 1 100; do
  for c in 1 32; do
    l=${line[$b,$c]}
    printf "%-8s %-6s %12s %12s %10s %10s %8s\n" "$c" "$b" "$(kv batches_per_s "$l")" \
      "$(kv msgs_per_s "$l")" "$(kv p50_us "$l")" "$(kv p99_us "$l")" "$(kv errors "$l")"
  done
done
echo
echo "=== RF3: 3 members, replica_count 3 (each commit fsynced by all three), ${secs}s per cell ==="
printf "%-8s %-6s %12s %12s %10s %10s %8s\n" clients batch batches/s msgs/s p50_us p99_us errors
for b in 1 100; do
  for c in 1 32; do
    l=${rline[$b,$c]}
    printf "%-8s %-6s %12s %12s %10s %10s %8s\n" "$c" "$b" "$(kv batches_per_s "$l")" \
      "$(kv msgs_per_s "$l")" "$(kv p50_us "$l")" "$(kv p99_us "$l")" "$(kv errors "$l")"
  done
done
echo
echo "=== Failover: 3 members, replica_count 2, kill -9 of the leader ($fo_timers) ==="
echo "failover = kill to the first write acknowledged by another member; elected = kill to a"
echo "survivor reporting itself a serving leader; caught up = restart of the killed member"
echo "(ready) to every member having applied the leader's commit index"
printf "%-4s %-7s %-11s %12s %11s %13s %10s\n" run killed new_leader failover_ms elected_ms caughtup_ms retries
for l in "${fo_lines[@]}"; do
  retries=$(( $(kv no_answer "$l") + $(kv unknown_outcome "$l") + $(kv not_leader "$l") + \
              $(kv unavailable "$l") + $(kv unreachable "$l") ))
  printf "%-4s %-7s %-11s %12s %11s %13s %10s\n" "$(kv run "$l")" "$(kv killed "$l")" "$(kv new_leader "$l")" \
    "$(kv failover_ms "$l")" "$(kv elected_ms "$l")" "$(kv caughtup_ms "$l")" "$retries"
done
echo

python3 - "$(kv msgs_per_s "${line[1,32]}")" "$(kv msgs_per_s "${line[1,1]}")" \
          "$(kv p50_us "${line[1,1]}")" "$fsync_med" "$(kv p50_us "$rd")" \
          "$(kv msgs_per_s "${rline[1,32]}")" "$fo_runs" "${fo_ms[@]}" <<'EOF'
import sys
def num(s):
    try: return float(s)
    except ValueError: return None
t32, t1, p50, fs, rpc, r32 = map(num, sys.argv[1:7])
runs = int(sys.argv[7])
fo = [v for v in map(num, sys.argv[8:]) if v is not None]
if t32 is not None and t1:
    r = t32 / t1
    print("target (a) 32 clients / 1 client throughput (batch 1): %.1fx (target >= 5x) %s"
          % (r, "PASS" if r >= 5 else "MISS"))
else:
    print("target (a) 32 clients / 1 client throughput: no data MISS")
if p50 is not None and fs:
    r = p50 / fs
    print("target (b) 1-client median enqueue latency / median fsync: %.0f us / %.0f us = %.2fx (target < 2x) %s"
          % (p50, fs, r, "PASS" if r < 2 else "MISS"))
else:
    print("target (b) 1-client median latency / median fsync: no data MISS")
if p50 is not None and fs and rpc is not None:
    print("  1-client enqueue p50 %.0f us = fsync %.0f + RPC floor %.0f + rest of the write path %.0f"
          % (p50, fs, rpc, p50 - fs - rpc))
if r32 is not None and t32:
    r = r32 / t32
    print("target (c) RF3 / single-daemon throughput, 32 clients batch 1: %.0f / %.0f msgs/s = %.0f%% (target >= 50%%) %s"
          % (r32, t32, 100 * r, "PASS" if r >= 0.5 else "MISS"))
else:
    print("target (c) RF3 / single-daemon throughput, 32 clients batch 1: no data MISS")
if fo:
    s = sorted(fo)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    print("target (d) median failover, kill -9 of the leader to first acked write (replica_count 2 of 3): "
          "%.0f ms over %d of %d runs, max %.0f ms (target < 1500 ms) %s"
          % (med, len(s), runs, s[-1], "PASS" if med < 1500 and len(s) == runs else "MISS"))
else:
    print("target (d) median failover: no data MISS")
EOF
if grep -q 'level=\(warn\|error\)' "$log"; then
  echo "bench: keyloadd logged warnings/errors (first 5):"
  grep 'level=\(warn\|error\)' "$log" | head -n 5
fi
fi  # KL-1/KL-2 summary

if [ "$parts" = all ] || [ "$parts" = kl3 ]; then  # ---- KL-3 summary ----
echo
echo "=== KL-3: sessions and authorization, RF3 (3 members, replica_count 3, sessions required), ${secs}s per cell ==="
echo "principal benchpub (no role; QueuePublish on queue kl3 of bench/kl3), every request sealed (SDK, one"
echo "client and session per thread); s+a = session + authorization time per request on the leader's"
echo "loop thread (MemberStatus deltas: (session_ns + authz_ns) / sealed requests); unsealed = the RF3"
echo "matrix above (insecure_local_admin, raw RPC client, no member keys), sealed/unsealed = msgs/s ratio"
printf "%-8s %-6s %10s %10s %9s %9s %6s %8s %8s %8s %8s %8s %10s %7s\n" clients batch batches/s msgs/s p50_us \
  p99_us errors requests sess_us authz_us s+a_us s+a/p50 unsealed/s ratio
for b in 1 100; do
  for c in 1 32; do
    l=${kline[$b,$c]:-}
    u=$(kv msgs_per_s "${rline[$b,$c]:-}")
    s=$(kv msgs_per_s "$l")
    ratio=$(python3 -c 'import sys
try: print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))
except Exception: print("n/a")' "$s" "$u")
    pctv=$(kv cost_pct_p50 "$l")
    printf "%-8s %-6s %10s %10s %9s %9s %6s %8s %8s %8s %8s %8s %10s %7s\n" "$c" "$b" "$(kv batches_per_s "$l")" \
      "$s" "$(kv p50_us "$l")" "$(kv p99_us "$l")" "$(kv errors "$l")" "$(kv sealed_requests "$l")" \
      "$(kv session_us_per_req "$l")" "$(kv authz_us_per_req "$l")" "$(kv cost_us_per_req "$l")" \
      "${pctv:+$pctv%}" "${u:-n/a}" "$ratio"
  done
done
if [ -n "$hs_out" ]; then
  echo "handshake ($(kv n "$hs_out") Hellos, one member alone, one connection, each answer verified by the client;"
  echo "  make's -O2 build): loop thread hello_ns/hellos $(kv hello_loop_us "$hs_out") us;" \
       "process CPU (utime+stime) per Hello $(kv hello_cpu_us "$hs_out") us - per MemberStatus" \
       "$(kv status_cpu_us "$hs_out") us = $(kv cpu_per_hello_us "$hs_out") us"
  echo "  (same from the threads' schedstat, ns: $(kv sched_hello_us "$hs_out") - $(kv sched_status_us "$hs_out") =" \
       "$(kv sched_per_hello_us "$hs_out") us); client round trip p50: Hello $(kv hello_p50_us "$hs_out") us," \
       "MemberStatus $(kv status_p50_us "$hs_out") us"
fi
python3 - "$(kv cost_pct_p50 "${kline[1,1]:-}")" "$(kv cost_us_per_req "${kline[1,1]:-}")" \
          "$(kv p50_us "${kline[1,1]:-}")" "$(kv cpu_per_hello_us "$hs_out")" "$(kv hello_loop_us "$hs_out")" <<'EOF'
import sys
def num(s):
    try: return float(s)
    except ValueError: return None
share, cost, p50, cpu, loop = map(num, sys.argv[1:6])
if share is not None:
    print("target (KL-3 a) session+authz share of request time at batch 1: %.2f%% (< 5%%): %s"
          % (share, "PASS" if share < 5 else "MISS"))
    print("  1 client, batch 1: %.1f us of session+authz per request, median request %.0f us" % (cost, p50))
else:
    print("target (KL-3 a) session+authz share of request time at batch 1: no data MISS")
if cpu is not None:
    print("target (KL-3 b) daemon CPU per handshake: %.0f µs (< 200 µs): %s"
          % (cpu, "PASS" if cpu < 200 else "MISS"))
    print("  process CPU per Hello minus per MemberStatus; the loop thread's own count: %.0f µs" % loop)
else:
    print("target (KL-3 b) daemon CPU per handshake: no data MISS")
EOF
fi  # KL-3 summary

# ---- KL-9: a sealed RF3 cluster against NATS JetStream R3, alternating ----
# nodisk_cell: what the disk adds to the RF3 1-client commit, measured rather than argued.
# The same 1-client sealed cell (three runs, the median kept) on a second RF3 cluster whose
# members keep their stores on tmpfs (/dev/shm), where fdatasync returns at once. That is
# NOT a durable configuration and not a KeyLoad figure: a power loss there loses everything.
# Its p50 is the commit path without the disk (hops, wake-ups, CPU); the RF3 cell's p50 minus
# it is what three synced copies on this machine's one disk add. Skipped (and said so) where
# /dev/shm is missing, not writable or has under 256 MiB free. Sets nodisk_p50 (or empty).
nodisk_p50=""
nodisk_dir=""
nodisk_cell() {
  local free_kb r out p50s=()
  free_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
  if [ ! -d /dev/shm ] || [ ! -w /dev/shm ] || [ "${free_kb:-0}" -lt 262144 ]; then
    echo "bench: no-disk cell skipped: /dev/shm is missing, not writable or under 256 MiB free"
    return 0
  fi
  local port=$((peers_port + 10))
  ports_free "$port" || { failed=1; return 0; }
  nodisk_dir=$(mktemp -d /dev/shm/kl-bench-nodisk-XXXXXX) || { failed=1; return 0; }
  kl3_keys "$nodisk_dir" p0m1 p0m2 p0m3 || { failed=1; return 0; }
  make_cluster "$nodisk_dir" bench-nodisk 3 "$port" sealed >/dev/null || exit 2
  for n in p0m1 p0m2 p0m3; do start_member "$nodisk_dir" "$n"; done
  "$bench" --leader-of "$(cluster_urls "$port")" >/dev/null || { echo "bench: the no-disk cluster elected no serving leader"; exit 1; }
  if kl3_setup "$nodisk_dir" publisher; then
    for r in 1 2 3; do
      out=$(timeout $((secs * 3 + 120)) "$bench" --cluster "$nodisk_dir/cluster.json" --principal benchpub \
            --key "$nodisk_dir/pub.key" --database bench/kl3 --queue kl3 --batch-size 1 --seconds "$secs" \
            --clients 1 --in-flight 1)
      echo "bench: no-disk run $r KeyLoad RF3 sealed, 1 in flight, stores on tmpfs (diagnostic, NOT durable): ${out:-no result}"
      [ -n "$out" ] && p50s+=("$(kv p50_us "$out")") || failed=1
      members_alive "$nodisk_dir" || exit 1
    done
    [ ${#p50s[@]} = 3 ] && nodisk_p50=$(probe_middle "${p50s[@]}")
  else
    failed=1
  fi
  stop_cluster "$nodisk_dir"
  rm -rf "$nodisk_dir"
  nodisk_dir=""
}

# longpoll_cell DIR: an idle consumer (principal benchcons, QueueConsume on the empty queue
# lp) runs `keyload receive lp --wait-ms 10000` once; the leader's last log index (MemberStatus)
# before and after gives the entries appended meanwhile (the CLI's own session included).
# Sets $longpoll to "entries=N wait_ms=M" or to why there is no figure.
longpoll_cell() {
  local d=$1 before after t0 t1 rc urls
  urls=$(cluster_urls "$peers_port")
  if ! "$cli" receive --help 2>&1 | grep -q -- '--wait-ms'; then
    longpoll="not available (keyload receive has no --wait-ms)"
    echo "bench: long-poll receive: $longpoll"
    return 0
  fi
  if ! { kl3_admin "$d" queue create lp --partition 0 && kl3_admin "$d" principal create benchcons --key-out "$d/cons.key" &&
         kl3_admin "$d" principal grant benchcons QueueConsume --queue lp; }; then
    longpoll="setup failed"; failed=1
    echo "bench: long-poll setup (queue lp, principal benchcons) failed:"; tail -n 5 "$d/setup.log"
    return 1
  fi
  sleep 1   # let the setup's commits settle (applied everywhere) before the first reading
  before=$(kv last_index "$("$bench" --leader-of "$urls")")
  t0=$(date +%s%N)
  timeout 30 "$cli" --cluster "$d/cluster.json" --database bench/kl3 --timeout 20000 --principal benchcons \
    --key "$d/cons.key" receive lp --wait-ms 10000 >>"$d/setup.log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  after=$(kv last_index "$("$bench" --leader-of "$urls")")
  if [ $rc -ne 0 ] || [ -z "$before" ] || [ -z "$after" ]; then
    longpoll="failed (receive exit $rc)"; failed=1
    echo "bench: long-poll receive failed (exit $rc):"; tail -n 3 "$d/setup.log"
    return 1
  fi
  longpoll="entries=$((after - before)) wait_ms=$(((t1 - t0) / 1000000))"
  echo "bench: long-poll receive, 10 s on an empty queue: $longpoll"
}
declare -A peer    # "CELL,RUN" -> that run's output line (CELL: rf3_1 js_1 rf3_64 rf3_64t js_64 xfer_1 pg_1 xfer_32 pg_8)
peer_out=$root/var/bench
js_source=""
longpoll=""
if [ $want_peers = 1 ]; then
  # shellcheck source=tests/bench/peers/peers.sh
  . "$root/tests/bench/peers/peers.sh"
  peers_npm || exit 2
  mkdir -p "$peer_out/lat"
  chmod 755 "$peer_out"   # the postgres user creates its cluster below it
  rm -f "$peer_out"/lat/*.txt "$peer_out/summary.json" "$peer_out/latency.png"
  pr=$tmp/peers-rf3
  ports_free "$peers_port" || exit 2
  kl3_keys "$pr" p0m1 p0m2 p0m3 || exit 2
  pr_timers=$(make_cluster "$pr" bench-peers 3 "$peers_port" sealed) || exit 2
  for n in p0m1 p0m2 p0m3; do start_member "$pr" "$n"; done
  ldr=$("$bench" --leader-of "$(cluster_urls "$peers_port")") || { echo "bench: peers RF3 cluster elected no serving leader"; exit 1; }
  echo "bench: peers RF3 cluster ready, sessions required ($pr_timers); $ldr"
  kl3_setup "$pr" publisher || exit 1
  pr_pids="${mpid["$pr p0m1"]},${mpid["$pr p0m2"]},${mpid["$pr p0m3"]}"
  js_up "$tmp/js" "$js_port" || exit 1
  echo "bench: JetStream R3 ready ($js_urls, pids $(js_pids))"
  pr_sealed=(--cluster "$pr/cluster.json" --principal benchpub --key "$pr/pub.key" --database bench/kl3 --queue kl3
             --batch-size 1 --seconds "$secs")
  fsync3_runs=()
  for r in 1 2 3; do
    # The RF3 cells' floor, on the disk their members use, with them up and idle: one probe
    # right before each round's 1-client cell.
    fsync3_once "$pr"
    for c in 1 64; do
      # As the JetStream publisher does, one client keeps c batches in flight (the SDK's
      # asynchronous calls); at 1 that is the blocking call.
      out=$(timeout $((secs * 3 + 120)) "$bench" "${pr_sealed[@]}" --clients 1 --in-flight "$c" \
            --cpu-pids "$pr_pids" --lat-out "$peer_out/lat/rf3_$c.r$r.txt")
      rc=$?
      echo "bench: peers run $r KeyLoad RF3 sealed, $c in flight: ${out:-no result (exit $rc)}"
      [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
      peer[rf3_$c,$r]=$out
      members_alive "$pr" || exit 1
      if [ "$c" = 64 ]; then  # informational: 64 client threads, one blocking call each
        out=$(timeout $((secs * 3 + 120)) "$bench" "${pr_sealed[@]}" --clients 64 --cpu-pids "$pr_pids")
        rc=$?
        echo "bench: peers run $r KeyLoad RF3 sealed, 64 threads x 1 (informational): ${out:-no result (exit $rc)}"
        [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
        peer[rf3_64t,$r]=$out
        members_alive "$pr" || exit 1
      fi
      out=$(timeout $((secs * 3 + 60)) node "$root/tests/bench/peers/js.mjs" publish --servers "$js_urls" \
            --in-flight "$c" --seconds "$secs" --pids "$(js_pids)" --lat-out "$peer_out/lat/js_$c.r$r.txt")
      rc=$?
      echo "bench: peers run $r JetStream R3, $c in flight: ${out:-no result (exit $rc)}"
      [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
      peer[js_$c,$r]=$out
    done
  done
  js_source=$(timeout 120 node "$root/tests/bench/peers/js.mjs" source --servers "$js_urls" --timeout-s 90)
  echo "bench: JetStream sourcing (informational): ${js_source:-no result}"
  fsync3_pick
  # The other floor of a replicated write on this host: a thread waking another on another
  # CPU (bench_wake.c), which the 1-client cell's critical path pays several times.
  wake_line=$("$bench" --wake-probe) || { echo "bench: wake probe failed"; failed=1; wake_line=""; }
  [ -n "$wake_line" ] && echo "bench: $wake_line"
  # Ratios against the peers move with the machine under them (its CPU, its disk's flush):
  # the figures of two runs compare only when this line matches.
  machine_cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
  machine_cpus=$(nproc)
  machine_kernel=$(uname -r)
  echo "bench: machine: cpu=\"${machine_cpu:-unknown}\" cpus=$machine_cpus kernel=$machine_kernel"
  js_down
  longpoll_cell "$pr"
  stop_cluster "$pr"
  nodisk_cell
fi

# ---- KL-4: remote transfers on an RF3 cluster of 3 partitions x 3 members ----
# kl4_cluster DIR PORT: DIR/cluster.json from deploy/local-rf3.json (timers, limits, three
# partitions of three members), sessions required: member pPmM's client port PORT+3P+M-1,
# its peer port that +50, its public key from DIR/pPmM.pub (kl3_keys).
kl4_cluster() {
  python3 - "$root/deploy/local-rf3.json" "$1" "$2" <<'EOF3' || return 1
import json, sys
src, d, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open(src))
c["cluster"] = "bench-kl4"
c["insecure_local_admin"] = False
for p in c["partitions"]:
    for m in p["members"]:
        k = 3 * p["id"] + m["id"] - 1
        n = "p%dm%d" % (p["id"], m["id"])
        m["client"] = "tcp://127.0.0.1:%d" % (port + k)
        m["peer"] = "tcp://127.0.0.1:%d" % (port + 50 + k)
        m["data"] = "%s/%s" % (d, n)
        m["public_key"] = open("%s/%s.pub" % (d, n)).read().strip()
json.dump(c, open(d + "/cluster.json", "w"), indent=2)
t = c.get("timers", {})
print("tick_ms=%s election_ms=%s heartbeat_ms=%s" % (t.get("tick_ms"), t.get("election_ms"), t.get("heartbeat_ms")))
EOF3
}
kl4_cli() {  # DIR ARGS...: the CLI as the administrator benchadmin of bench/kl4, bounded
  local d=$1
  shift
  timeout 60 "$cli" --cluster "$d/cluster.json" --database bench/kl4 --timeout 20000 \
    --principal benchadmin --key "$d/admin.key" "$@" >>"$d/setup.log" 2>&1
}
# ---- KL-5: coordinator-driven transfers on the KL-4 cluster ----
# coord_cfg DIR FILE [FLUSH_MS WORKERS]: a coordinator config for benchxfer of bench/kl4 (no
# FLUSH_MS/WORKERS: the defaults), its status file beside FILE. Mode 0600: it names a key.
coord_cfg() {
  local extra='{}'
  [ -n "${3:-}" ] && extra=$(jq -n --argjson f "$3" --argjson w "$4" '{flush_interval_ms: $f, workers: $w}')
  (umask 077; jq -n --arg c "$1/cluster.json" --arg k "$1/xfer.key" --arg st "${2%.json}.status.json" \
     --argjson extra "$extra" \
     '{cluster_file: $c, database: "bench/kl4", transfer_coordinator_principal_id: "benchxfer",
       principal_key_file: $k, status_file: $st} + $extra' >"$2")
}
# start_coord FILE LOG: starts the coordinator (pid in $cpid) and waits up to 10 s for its
# msg="starting" line. Not in a subshell: the pid must stay our child.
start_coord() {
  "$coordinator" --config "$1" 2>>"$2" &
  cpid=$!
  for _ in $(seq 1 100); do
    grep -q 'msg="starting"' "$2" 2>/dev/null && return 0
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench: keyload-coordinator did not start within 10 s; its log:"
  tail -n 10 "$2"
  stop_pid "$cpid" keyload-coordinator
  cpid=""
  return 1
}
declare -A cline   # "FLUSH,WORKERS" -> the coord: line
declare -A pline   # FLUSH -> the coord: line of the paced run (32 workers, 20 creates/s)
coord_rss=""       # "hwm_kib=... rss_kib=... buffered=... capacity=..."
coord_warn=0
coord_warn_first=""
# coord_setup DIR: once per cluster, what every coordinator cell needs. The coordinator's
# principal is benchxfer, already a database administrator with QueuePublish and
# QueueInspect; transfers need these two as well (admin flags are off for data grants).
coord_ready=0
coord_setup() {
  [ $coord_ready = 1 ] && return 0
  kl4_cli "$1" principal grant benchxfer QueueConsume --queue '*' &&
    kl4_cli "$1" principal grant benchxfer QueueAck --queue '*' &&
    kl4_cli "$1" queue create cdst --partition 2 "${big[@]}" && coord_ready=1
}
coord_part() {
  local d=$1 f w n rate out rc cfg log
  if ! { coord_setup "$d" && kl4_cli "$d" queue create crss --partition 1 "${big[@]}"; }; then
    echo "bench: KL-5 setup (grants, queues cdst/crss) failed:"
    tail -n 5 "$d/setup.log"
    failed=1
    return 1
  fi
  local xc=(--cluster "$d/cluster.json" --principal benchxfer --key "$d/xfer.key" --database bench/kl4)
  for f in 100 1; do
    for w in 1 4 16 32; do
      # About $secs seconds of work: each worker turns at most every max(f, 15) ms (a turn is
      # two commits and a few fresh reads), and the cluster does not go past ~500/s.
      rate=$(( w * 1000 / (f > 15 ? f : 15) ))
      [ "$rate" -gt 500 ] && rate=500
      n=$(( rate * secs ))
      [ "$n" -lt 20 ] && n=20
      cfg=$d/coord-f${f}w${w}.json
      log=$d/coord-f${f}w${w}.log
      coord_cfg "$d" "$cfg" "$f" "$w"
      if ! kl4_cli "$d" queue create "cs${f}w${w}" --partition 1 "${big[@]}"; then
        echo "bench: KL-5 queue cs${f}w${w} could not be created"; failed=1; continue
      fi
      start_coord "$cfg" "$log" || { failed=1; continue; }
      out=$(timeout 300 "$bench" --coord-create "$n" "${xc[@]}" --queue "cs${f}w${w}" --dest-queue cdst \
            --clients 32 --lane-tag "f${f}w${w}" --drain-seconds 120)
      rc=$?
      echo "bench: coordinator flush_interval_ms=$f workers=$w: ${out:-no result (exit $rc)}"
      [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
      [ "$(kv drained "$out")" = 1 ] || { echo "bench: not everything was delivered within 120 s; coordinator log tail:"; tail -n 5 "$log"; }
      cline[$f,$w]=$out
      if [ "$w" = 32 ] && kl4_cli "$d" queue create "cp${f}" --partition 1 "${big[@]}"; then
        # The same coordinator, 20 creates/s (well below its rate): latency without a backlog.
        out=$(timeout 300 "$bench" --coord-create $(( 20 * secs )) "${xc[@]}" --queue "cp${f}" --dest-queue cdst \
              --clients 4 --rate 20 --lane-tag "p${f}" --drain-seconds 120)
        rc=$?
        echo "bench: coordinator flush_interval_ms=$f workers=$w, 20 creates/s: ${out:-no result (exit $rc)}"
        [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
        pline[$f]=$out
      fi
      stop_pid "$cpid" keyload-coordinator
      cpid=""
      members_alive "$d" || exit 1
    done
  done
  # The default config (no flush_interval_ms/workers keys): the coordinator as shipped.
  # coord_default_cell measured it already on this cluster (the median of its runs).
  n=$(( 500 * secs ))
  if [ -n "$coord_default" ]; then
    echo "bench: coordinator with the default config: measured before this part: $coord_default"
    cline[def]=$coord_default
  elif kl4_cli "$d" queue create cdef --partition 1 "${big[@]}"; then
    coord_cfg "$d" "$d/coord-def.json"
    if start_coord "$d/coord-def.json" "$d/coord-def.log"; then
      out=$(timeout 300 "$bench" --coord-create "$n" "${xc[@]}" --queue cdef --dest-queue cdst \
            --clients 32 --lane-tag def --drain-seconds 120)
      rc=$?
      echo "bench: coordinator with the default config: ${out:-no result (exit $rc)}"
      [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
      cline[def]=$out
      stop_pid "$cpid" keyload-coordinator
      cpid=""
    else
      failed=1
    fi
  else
    echo "bench: KL-5 queue cdef could not be created"; failed=1
  fi
  # Memory with 10,000 pending: created first, then a coordinator with the default config.
  out=$(timeout 300 "$bench" --coord-create 10000 "${xc[@]}" --queue crss --dest-queue cdst --clients 32 \
        --lane-tag rss --no-wait)
  rc=$?
  echo "bench: 10,000 pending for the memory check: ${out:-no result (exit $rc)}"
  if [ $rc -eq 0 ] && [ "$(kv created "$out")" = 10000 ]; then
    cfg=$d/coord-rss.json
    log=$d/coord-rss.log
    coord_cfg "$d" "$cfg"
    if start_coord "$cfg" "$log"; then
      local st buffered=0 cap=4096 prev=-1 same=0
      # Full buffers (or a fill that stopped growing for three snapshots, 2 s apart), 30 s at most.
      for _ in $(seq 1 60); do
        sleep 0.5
        st=$("$coordinator" --status --config "$cfg" 2>/dev/null) || continue
        buffered=$(jq '[.buffers[] | .queued + .in_flight] | add // 0' <<<"$st")
        cap=$(jq '[.buffers[].capacity] | add // 0' <<<"$st")
        [ "$buffered" -ge $(( cap * 95 / 100 )) ] && break
        if [ "$buffered" = "$prev" ]; then same=$((same + 1)); [ $same -ge 12 ] && break; else same=0; fi
        prev=$buffered
      done
      local hwm rss
      hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$cpid/status" 2>/dev/null)
      rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$cpid/status" 2>/dev/null)
      coord_rss="memory: hwm_kib=${hwm:-?} rss_kib=${rss:-?} buffered=$buffered capacity=$cap"
      echo "bench: coordinator (defaults) with 10,000 pending: $coord_rss"
      stop_pid "$cpid" keyload-coordinator
      cpid=""
    else
      failed=1
    fi
  else
    failed=1
  fi
  coord_warn=$(cat "$d"/coord-*.log 2>/dev/null | grep -c 'level=\(warn\|error\)')
  coord_warn_first=$(cat "$d"/coord-*.log 2>/dev/null | grep 'level=\(warn\|error\)' | head -n 5)
  members_alive "$d" || exit 1
}
xline1=""
xline32=""
xenq=""
# median_run CELL KEY ROUNDS: the run (1..ROUNDS) of peer[CELL,run] whose KEY is the median.
median_run() {
  local r
  for r in $(seq 1 "$3"); do printf '%s %s\n' "$(kv "$2" "${peer[$1,$r]:-}")" "$r"; done |
    sort -g | sed -n "$(( ($3 + 1) / 2 ))p" | awk '{print $2}'
}
# coord_default_cell DIR [QUEUE]: KL-9's coordinator-driven rate at the default config (no
# flush or workers given), measured as the KL-5 cells are (32 creating clients, QUEUE -> cdst).
# The peers and xcoord parts run it right after every round's client-driven 32-in-flight
# cell, on a source queue of its own per round (cdef1, cdef2, ...), and keep the median run
# in coord_default. It runs before the KL-5 part: that part leaves 10,000 transfers pending,
# which a coordinator started afterwards would drive too, in competition with these.
coord_default=""
# sched_start PREFIX, before a cell: whether the cell was short of CPU, as every thread's run
# and run-queue wait over most of its measured seconds (from 2 s after the start, past
# priming and warm-up; tests/bench/sched_load.sh), in the background. sched_end, after the
# cell's result line: waits for it and prints its line.
sched_start() {
  rm -f "$tmp/sched.txt"
  bash "$root/tests/bench/sched_load.sh" window 2 $((secs > 2 ? secs - 1 : 1)) "$tmp/sched.txt" "$1" &
  sched_pid=$!
}
sched_end() {
  wait "$sched_pid"
  cat "$tmp/sched.txt" 2>/dev/null
}
# trace_start DIR / trace_end DIR PREFIX: with BENCH_TRACE, the replication legs of the
# cell between them, per data partition (repl_trace.sh over the lines its members logged
# meanwhile); without it, nothing.
declare -A trace_mark
trace_start() {
  local f
  [ ${#trace_opt[@]} -gt 0 ] || return 0
  for f in "$1"/p[12]m*.log; do trace_mark[$f]=$(wc -l <"$f"); done
  : >"$1/client-trace.txt"
}
trace_end() {
  local p f
  [ ${#trace_opt[@]} -gt 0 ] || return 0
  for p in 1 2; do
    { for f in "$1"/p${p}m*.log; do tail -n +"$(( ${trace_mark[$f]:-0} + 1 ))" "$f"; done
      grep "^client trace partition=$p " "$1/client-trace.txt"; } |
      "$root/tests/bench/repl_trace.sh" | sed "s/^/$2 partition $p: /"
  done
}

coord_default_cell() {  # DIR [QUEUE, default cdef]
  local d=$1 q=${2:-cdef} n cfg=$1/coord-default.json log=$1/coord-default.log out rc
  local xc=(--cluster "$d/cluster.json" --principal benchxfer --key "$d/xfer.key" --database bench/kl4)
  if ! coord_setup "$d"; then
    echo "bench: coordinator setup (grants, queue cdst) failed:"; tail -n 5 "$d/setup.log"; failed=1; return 1
  fi
  kl4_cli "$d" queue create "$q" --partition 1 "${big[@]}" || { echo "bench: queue $q could not be created"; failed=1; return 1; }
  if [ -n "${BENCH_COORD_WORKERS:-}" ]; then coord_cfg "$d" "$cfg" 10 "$BENCH_COORD_WORKERS"; else coord_cfg "$d" "$cfg"; fi
  start_coord "$cfg" "$log" || { failed=1; return 1; }
  # About BENCH_SECONDS of work at the client-driven rate of this run (100..20000 transfers):
  # a coordinator that keeps up drains it in that time; a slower one takes longer, up to 300 s.
  # The span includes fixed lags (the first discovery, the last timer flush), so a cell much
  # shorter than the client-driven one measures those more than the rate: a cap of 2000 made
  # it under 2 s of work at about 1100 transfers/s, against the client-driven cell's 5 s.
  n=$(python3 -c 'import sys
try: r = float(sys.argv[1])
except ValueError: r = 100
print(int(min(20000, max(100, r * float(sys.argv[2])))))' "$(kv transfers_per_s "$xline32")" "$secs")
  out=$(timeout 400 "$bench" --coord-create "$n" "${xc[@]}" --queue "$q" --dest-queue cdst --clients 32 \
        --lane-tag def --drain-seconds 300)
  rc=$?
  echo "bench: coordinator, default config: ${out:-no result (exit $rc)}"
  [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
  [ "$(kv drained "$out")" = 1 ] || { echo "bench: not everything was delivered within 300 s; coordinator log tail:"; tail -n 5 "$log"; }
  coord_default=$out
  stop_pid "$cpid" keyload-coordinator
  cpid=""
}
if [ "$parts" = all ] || [ "$parts" = xfer ] || [ "$parts" = coord ] || [ "$parts" = peers ] || [ "$parts" = xcoord ]; then
  x=$tmp/kl4
  xnodes="p0m1 p0m2 p0m3 p1m1 p1m2 p1m3 p2m1 p2m2 p2m3"
  for i in $(seq 0 8); do
    for p in $((xfer_port + i)) $((xfer_port + 50 + i)); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "bench: port $p is already in use; set BENCH_XFER_PORT"
        exit 2
      fi
    done
  done
  # shellcheck disable=SC2086
  kl3_keys "$x" $xnodes || exit 2
  mkdir -p "$x/pids"
  x_timers=$(kl4_cluster "$x" "$xfer_port") || exit 2
  for n in $xnodes; do start_member "$x" "$n"; done
  for p in 0 1 2; do
    "$bench" --leader-of "tcp://127.0.0.1:$((xfer_port + 3 * p)),tcp://127.0.0.1:$((xfer_port + 3 * p + 1)),tcp://127.0.0.1:$((xfer_port + 3 * p + 2))" \
      >/dev/null || { echo "bench: KL-4 partition $p elected no serving leader"; exit 1; }
  done
  echo "bench: KL-4 RF3 cluster ready: 3 partitions x 3 members, sessions required ($x_timers)"
  big=(--max-messages 100000000 --max-bytes 107374182400)
  if timeout 60 "$cli" --cluster "$x/cluster.json" --database bench/kl4 --timeout 20000 admin bootstrap \
       --tenant bench --database kl4 --admin benchadmin --key-out "$x/admin.key" \
       --cluster-secret "$tmp/cluster.secret" >>"$x/setup.log" 2>&1 &&
     kl4_cli "$x" queue create xsrc --partition 1 "${big[@]}" &&
     kl4_cli "$x" queue create xdst --partition 2 "${big[@]}" &&
     kl4_cli "$x" queue create xenq --partition 1 "${big[@]}" &&
     kl4_cli "$x" principal create benchxfer --key-out "$x/xfer.key" --role database-admin &&
     kl4_cli "$x" principal grant benchxfer QueuePublish --queue '*' &&
     kl4_cli "$x" principal grant benchxfer QueueInspect --queue '*'; then
    xcommon=(--cluster "$x/cluster.json" --principal benchxfer --key "$x/xfer.key" --database bench/kl4)
    # With the peers: three rounds, each transfer cell followed by the PostgreSQL outbox
    # (1 client after 1 in flight, 8 clients after 32).
    rounds=1
    [ $want_peers = 1 ] && { rounds=3; pg_up "$peer_out/pg" || exit 1; }
    cells="1 32"
    [ "$parts" = xcoord ] && { rounds=${BENCH_ROUNDS:-1}; cells=${BENCH_XCOORD_CELLS:-32}; }
    for r in $(seq 1 $rounds); do
      for c in $cells; do
        lat=()
        [ $want_peers = 1 ] && lat=(--lat-out "$peer_out/lat/xfer_$c.r$r.txt")
        xc_how=(--clients "$c")
        [ "$c" -gt 1 ] && [ "${BENCH_XFER_THREADS:-0}" != 1 ] && xc_how=(--clients 1 --in-flight "$c")
        sched_start "bench: transfer in flight $c, scheduling:"
        trace_start "$x"
        ctrace=()
        [ ${#trace_opt[@]} -gt 0 ] && ctrace=(--trace-out "$x/client-trace.txt" --trace-every "$BENCH_TRACE")
        out=$(timeout $((secs * 3 + 180)) "$bench" --transfer "${xcommon[@]}" --queue xsrc --dest-queue xdst \
              "${xc_how[@]}" --seconds "$secs" "${lat[@]}" "${ctrace[@]}")
        rc=$?
        echo "${out:-bench: transfer clients=$c: no result (exit $rc)}"
        sched_end
        trace_end "$x" "bench: transfer in flight $c,"
        [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
        peer[xfer_$c,$r]=$out
        members_alive "$x" || exit 1
        # The coordinator-driven cell right after the client-driven one it is a ratio of, in
        # every round, so both see the same cluster state (each round adds transfers).
        if [ "$c" = 32 ] && { [ "$parts" = xcoord ] || [ $want_peers = 1 ]; }; then
          xline32=$out
          coord_default=""  # a cell that fails leaves no line, not the last round's
          coord_default_cell "$x" "cdef$r"
          peer[coord,$r]=$coord_default
        fi
        [ $want_peers = 1 ] || continue
        pc=$(( c == 1 ? 1 : 8 ))
        sched_start "bench: PostgreSQL outbox $pc clients, scheduling:"
        out=$(timeout $((secs * 3 + 60)) node "$root/tests/bench/peers/pg.mjs" transfer --host "$pg_dir" \
              --clients "$pc" --seconds "$secs" --lat-out "$peer_out/lat/pg_$pc.r$r.txt")
        rc=$?
        echo "bench: peers run $r PostgreSQL outbox, $pc clients: ${out:-no result (exit $rc)}"
        sched_end
        [ $rc -eq 0 ] && [ -n "$out" ] || failed=1
        peer[pg_$pc,$r]=$out
      done
    done
    if [ $want_peers = 1 ] && [ "${BENCH_XFER_THREADS:-0}" != 1 ]; then
      out=$(timeout $((secs * 3 + 180)) "$bench" --transfer "${xcommon[@]}" --queue xsrc --dest-queue xdst \
            --clients 32 --seconds "$secs")
      echo "bench: peers transfers, 32 client threads of one transfer each (informational): ${out:-no result}"
    fi
    [ $want_peers = 1 ] && pg_down
    xline1=${peer[xfer_1,$(median_run xfer_1 transfers_per_s "$rounds")]:-}
    xline32=${peer[xfer_32,$(median_run xfer_32 transfers_per_s "$rounds")]:-}
    coord_default=${peer[coord,$(median_run coord transfers_per_s "$rounds")]:-}
    if [ "$parts" != peers ] && [ "$parts" != xcoord ]; then
      xenq=$(timeout $((secs * 3 + 120)) "$bench" "${xcommon[@]}" --queue xenq --clients 32 --batch-size 1 \
             --seconds "$secs")
      rc=$?
      echo "${xenq:-bench: KL-4 enqueue: no result (exit $rc)}"
      [ $rc -eq 0 ] && [ -n "$xenq" ] || failed=1
      members_alive "$x" || exit 1
    fi
    x_ok=1
  else
    echo "bench: KL-4 setup (bootstrap, queues xsrc/xdst/xenq, principal benchxfer, grants) failed:"
    tail -n 5 "$x/setup.log"
    failed=1
  fi
  # KL-4's members' warnings, before KL-5 adds its own (counted separately).
  x_warn=$(cat "$x"/p*m*.log | grep -c 'level=\(warn\|error\)')
  x_warn_first=$(cat "$x"/p*m*.log | grep 'level=\(warn\|error\)' | head -n 5)
  if [ "${x_ok:-0}" = 1 ] && { [ "$parts" = all ] || [ "$parts" = coord ]; }; then
    coord_part "$x"
  fi
  stop_cluster "$x"
fi
if [ "$parts" = all ] || [ "$parts" = xfer ] || [ "$parts" = coord ]; then  # ---- KL-4/KL-5 summary ----
  echo
  echo "=== KL-4: remote transfers, RF3 (3 partitions x 3 members, replica_count 3, sessions required), ${secs}s per cell ==="
  echo "one transfer = Create (xsrc, partition 1) + Accept (xdst, partition 2) + receipt read + Complete, as the"
  echo "database administrator benchxfer (its QueuePublish/QueueInspect grants checked), every request sealed;"
  echo "latency = Create sent to Delivered answered; enqueue = single-message batches into xenq (partition 1)"
  printf "%-10s %12s %12s %12s %12s %8s\n" in_flight transfers/s p50_us p99_us max_us errors
  for l in "$xline1" "$xline32"; do
    printf "%-10s %12s %12s %12s %12s %8s\n" "$(kv clients "$l")" "$(kv transfers_per_s "$l")" "$(kv p50_us "$l")" \
      "$(kv p99_us "$l")" "$(kv max_us "$l")" "$(kv errors "$l")"
  done
  printf "enqueue, 32 in flight, batch 1: %s msgs/s, p50 %s us, p99 %s us, errors %s\n" "$(kv msgs_per_s "$xenq")" \
    "$(kv p50_us "$xenq")" "$(kv p99_us "$xenq")" "$(kv errors "$xenq")"
  python3 - "$(kv transfers_per_s "$xline32")" "$(kv msgs_per_s "$xenq")" <<'EOF4'
import sys
def num(s):
    try: return float(s)
    except ValueError: return None
t, e = map(num, sys.argv[1:3])
if t is not None and e:
    r = t / e
    print("target (KL-4) transfers/s / enqueue msgs/s, 32 in flight: %.1f / %.1f = %.1f%% (target >= 25%%) %s"
          % (t, e, 100 * r, "PASS" if r >= 0.25 else "MISS"))
else:
    print("target (KL-4) transfers/s / enqueue msgs/s, 32 in flight: no data MISS")
EOF4
  if [ "${x_warn:-0}" -gt 0 ]; then
    echo "bench: the KL-4 members logged $x_warn warnings/errors (first 5):"
    echo "$x_warn_first"
  fi
  if [ "$parts" = all ] || [ "$parts" = coord ]; then
    echo
    echo "=== KL-5: coordinator-driven transfers, same cluster, principal benchxfer, 32 creating clients ==="
    echo "rate = delivered / (last ReceiptVerified - first IntentCreated, commit times); latency = IntentCreated"
    echo "commit -> ReceiptVerified commit per transfer; all N are created at once, so latency includes the wait"
    echo "behind the backlog and the discovery interval (500 ms); create/s = the creating clients' rate"
    echo "(paced runs below: 20 creates/s, no backlog)"
    printf "%-9s %-8s %7s %10s %12s %9s %9s %9s %10s %7s\n" flush_ms workers N delivered transfers/s p50_ms p99_ms \
      max_ms create/s errors
    for f in 100 1; do
      for w in 1 4 16 32; do
        l=${cline[$f,$w]:-}
        printf "%-9s %-8s %7s %10s %12s %9s %9s %9s %10s %7s\n" "$f" "$w" "$(kv transfers "$l")" \
          "$(kv delivered "$l")" "$(kv transfers_per_s "$l")" "$(kv p50_ms "$l")" "$(kv p99_ms "$l")" \
          "$(kv max_ms "$l")" "$(kv creates_per_s "$l")" "$(kv errors "$l")"
      done
    done
    for f in 100 1; do
      l=${pline[$f]:-}
      printf "latency without a backlog (32 workers, flush %s ms, 20 creates/s, %s transfers): p50 %s ms, p99 %s ms, max %s ms, delivered %s, errors %s\n" \
        "$f" "$(kv transfers "$l")" "$(kv p50_ms "$l")" "$(kv p99_ms "$l")" "$(kv max_ms "$l")" "$(kv delivered "$l")" "$(kv errors "$l")"
    done
    l=${cline[def]:-}
    printf "default config (%s transfers): %s/s, p50 %s ms, p99 %s ms, max %s ms, delivered %s, errors %s\n" \
      "$(kv transfers "$l")" "$(kv transfers_per_s "$l")" "$(kv p50_ms "$l")" "$(kv p99_ms "$l")" \
      "$(kv max_ms "$l")" "$(kv delivered "$l")" "$(kv errors "$l")"
    echo "coordinator with the default config and 10,000 pending: ${coord_rss#memory: }"
    python3 - "$(kv transfers_per_s "$xline32")" "$(kv transfers_per_s "${cline[100,32]:-}")" \
              "$(kv transfers_per_s "${cline[1,32]:-}")" "$(kv hwm_kib "$coord_rss")" \
              "$(kv transfers_per_s "${cline[def]:-}")" <<'EOF5'
import sys
def num(s):
    try: return float(s)
    except ValueError: return None
kl4, c100, c1, hwm, cdef = map(num, sys.argv[1:6])
for name, c in (("default flush 100 ms", c100), ("flush 1 ms", c1)):
    if kl4 and c is not None:
        r = c / kl4
        print("target (KL-5 a) coordinator transfers/s at 32 workers (%s) / KL-4 client-driven at 32 in flight: "
              "%.1f / %.1f = %.0f%% (target >= 80%%) %s" % (name, c, kl4, 100 * r, "PASS" if r >= 0.8 else "MISS"))
    else:
        print("target (KL-5 a) coordinator transfers/s at 32 workers (%s): no data MISS" % name)
if kl4 and cdef is not None:
    r = cdef / kl4
    print("target (KL-5 a) coordinator transfers/s, default config / KL-4 client-driven at 32 in flight: "
          "%.1f / %.1f = %.0f%% (target >= 80%%) %s" % (cdef, kl4, 100 * r, "PASS" if r >= 0.8 else "MISS"))
else:
    print("target (KL-5 a) coordinator transfers/s, default config: no data MISS")
if hwm is not None:
    print("target (KL-5 b) coordinator VmHWM with 10,000 pending (default config): %.1f MiB (target < 64 MiB) %s"
          % (hwm / 1024, "PASS" if hwm < 64 * 1024 else "MISS"))
else:
    print("target (KL-5 b) coordinator VmHWM with 10,000 pending: no data MISS")
EOF5
    if [ "${coord_warn:-0}" -gt 0 ]; then
      echo "bench: the coordinators logged $coord_warn warnings/errors (first 5):"
      echo "$coord_warn_first"
    fi
  fi
fi
if [ $want_peers = 1 ]; then  # ---- KL-9 summary ----
  peer_res=$tmp/peers.tsv
  : >"$peer_res"
  for k in "${!peer[@]}"; do printf '%s\t%s\n' "$k" "${peer[$k]}" >>"$peer_res"; done
  printf 'longpoll\t%s\njs_source\t%s\n' "$longpoll" "$js_source" >>"$peer_res"
  peers_summary "$peer_res" "$peer_out" "$tmp" || failed=1
  printf "fsync, 3 copies at once (three 4 KiB overwrites + fdatasync on one disk, all done): median %s us, p99 %s us\n" \
    "${fsync3_med:-n/a}" "${fsync3_p99:-n/a}"
  if [ -s "$peer_out/summary.json" ]; then
    if jq --argjson m "${fsync3_med:-null}" --argjson p "${fsync3_p99:-null}" \
          --argjson wc "$(kv cross_cpu_p50_us "${wake_line:-}" | grep . || echo null)" \
          --argjson ws "$(kv same_cpu_p50_us "${wake_line:-}" | grep . || echo null)" \
          --arg mc "${machine_cpu:-unknown}" --argjson mn "${machine_cpus:-null}" --arg mk "${machine_kernel:-}" \
          --argjson nd "${nodisk_p50:-null}" \
         '. + {fsync3_p50_us: $m, fsync3_p99_us: $p, wake_cross_cpu_p50_us: $wc, wake_same_cpu_p50_us: $ws,
               rf3_nodisk_1c_p50_us: $nd, machine: {cpu: $mc, cpus: $mn, kernel: $mk}}' \
         "$peer_out/summary.json" >"$peer_out/summary.json.new" &&
       mv "$peer_out/summary.json.new" "$peer_out/summary.json"; then
      rf3_p50=$(jq -r '.rf3_sealed_1c_p50_us // empty' "$peer_out/summary.json")
      if [ -n "$rf3_p50" ] && [ -n "$fsync3_med" ]; then
        awk -v p="$rf3_p50" -v f="$fsync3_med" 'BEGIN {
          printf "RF3 1-client p50 above the 3-copy fsync floor: %.0f us (p50 %.0f us - floor %.0f us)\n", p - f, p, f }'
      fi
      js_p50=$(jq -r '.js_1c_p50_us // empty' "$peer_out/summary.json")
      if [ -n "$rf3_p50" ] && [ -n "$nodisk_p50" ] && [ -n "$js_p50" ]; then
        awk -v p="$rf3_p50" -v n="$nodisk_p50" -v j="$js_p50" 'BEGIN {
          printf "RF3 1-client p50 %.0f us = %.0f us of path without the disk (stores on tmpfs, not durable) + %.0f us the three synced copies add; JetStream 1-publisher p50 %.0f us (no fsync)\n", p, n, p - n, j }'
      fi
    else
      echo "bench: the 3-copy fsync floor could not be added to summary.json"; rm -f "$peer_out/summary.json.new"; failed=1
    fi
  fi
fi
if [ "$parts" = all ] || [ "$parts" = retain ]; then
  # ---- KL-10: disk per member after 10^6 enqueue + receive + ack cycles (retain_disk.sh:
  # 3 members, outcome_retention_ms 20000, default compaction policy, du once the horizon
  # passed, no manual compaction; target growth <= 64 MiB per member) ----
  echo "== KL-10 disk per member after ${BENCH_RETAIN_CYCLES:-1000000} cycles =="
  bash tests/bench/retain_disk.sh --cycles "${BENCH_RETAIN_CYCLES:-1000000}" --retention-ms 20000 \
    --work "$tmp/retain" || echo "bench: the KL-10 disk part failed"
fi
if [ "$parts" = all ] || [ "$parts" = big ]; then
  # ---- KL-10, large state (each script prints its figures with the target and PASS/MISS;
  # a MISS does not fail the run, a script that cannot run does):
  #   snap_install.sh: a 1 GiB snapshot install between two members, time and both peak RSS
  #     (target: each under 128 MiB, bounded by the chunk window, not the state);
  #   replace_big.sh: `keyload-cluster replace` of a dead member of a 3-of-3 partition holding
  #     1 GiB: the write outage from the command to the first acknowledged write (<= 10 s),
  #     with the snapshot's size, stream and install times and both peak RSS;
  #   restart_pending.sh: 10^6 pending messages (RF3, replica_count 3): kill -9 of a follower,
  #     of the leader, and of the whole partition; exec to serving (<= 5 s) ----
  big_mib=${BENCH_BIG_MIB:-1024}
  echo "== KL-10 snapshot install of a ${big_mib} MiB state =="
  bash tests/bench/snap_install.sh --keyloadd "$daemon" --mib "$big_mib" --work "$tmp/snap" ||
    { echo "bench: the KL-10 snapshot install part failed"; failed=1; }
  rm -rf "$tmp/snap"
  echo "== KL-10 replace of a dead member, ${big_mib} MiB state, 3-of-3 =="
  bash tests/bench/replace_big.sh --mib "$big_mib" ||
    { echo "bench: the KL-10 replace part failed"; failed=1; }
  echo "== KL-10 restart with ${BENCH_BIG_MESSAGES:-1000000} pending messages =="
  bash tests/bench/restart_pending.sh --keyloadd "$daemon" --messages "${BENCH_BIG_MESSAGES:-1000000}" \
    --work "$tmp/pending" || { echo "bench: the KL-10 restart part failed"; failed=1; }
  rm -rf "$tmp/pending"
fi
echo "bench: total run time $(( $(date +%s) - bench_t0 )) s (BENCH_PARTS=$parts, ${secs}s per cell)"
if [ ${#crashes[@]} -gt 0 ]; then
  echo "bench: FAILED: members exited by themselves during the failover runs:"
  printf '  %s\n' "${crashes[@]}"
fi
if [ "${rf3_warn:-0}" -gt 0 ]; then
  echo "bench: the RF3 members logged $rf3_warn warnings/errors (first 5):"
  echo "$rf3_warn_first"
fi
if [ "${kl3_warn:-0}" -gt 0 ]; then
  echo "bench: the KL-3 members logged $kl3_warn warnings/errors (first 5 of the RF3 ones):"
  echo "$kl3_warn_first"
fi
exit $failed
