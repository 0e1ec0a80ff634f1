#!/usr/bin/env bash
# rf3_lat.sh: the peers part's two KeyLoad RF3 sealed cells alone (1 client and 64 in flight,
# single-message batches, principal benchpub on queue kl3 exactly as run.sh sets them up),
# with each member's "replication stages" lines (daemon/repl/stages.h: queue, write,
# quorum, apply, send and replicate per own entry on the leader; queue and write per
# received entry on a follower; w_hop, w_run (with its sync alone, w_sync) and w_back per synced write on both) printed after each cell, so a change to the write path can be measured without
# the whole `make bench`. With RF3_PERF=1 the leader and one follower run under
# `perf record -g` in every cell (reports in $RF3_OUT/perf-<cell>.txt and perf-<cell>-f.txt).
# Each cell also prints, per member, the bytes written to disk and the minor page faults per
# acknowledged message.
# Environment: BENCH_BIN (binaries, default bin), BENCH_SECONDS (per cell, default 5),
#              RF3_PORT (first client port, default 18531; peers +100), RF3_CELLS (default
#              "1 64"; a cell 0 is the cluster left idle for the same time, for its
#              background CPU), RF3_RUNS (default 1), RF3_OUT (a directory kept for the logs
#              and the members' stores; default a temporary one that is removed; on tmpfs,
#              e.g. /dev/shm/kl-rf3, the cells measure the path without the disk: a
#              diagnostic, never durable), RF3_PERF=1, RF3_PIPELINE=1 (a cell N is one
#              client with N batches in flight, as the peers part's 64 cell, instead of N
#              clients; the cells of all runs share one cluster, so its state grows run by run
#              as in the peers part), RF3_TRACE=N (members run with --repl-trace N, and after
#              each cell tests/bench/repl_trace.sh prints the legs between the members).
# Every process this script starts is tracked by pid and stopped by pid on exit.
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$(pwd)
bin=${BENCH_BIN:-bin}
secs=${BENCH_SECONDS:-5}
port=${RF3_PORT:-18531}
cells=${RF3_CELLS:-1 64}
runs=${RF3_RUNS:-1}
for b in keyload-bench keyloadd keyload; do
  [ -x "$bin/$b" ] || { echo "rf3_lat: $bin/$b is missing; run make first"; exit 2; }
done
if [ -n "${RF3_OUT:-}" ]; then tmp=$RF3_OUT; keep=1; mkdir -p "$tmp" || exit 2; else tmp=$(mktemp -d /tmp/kl-rf3lat-XXXXXX); keep=0; fi
mkdir -p "$tmp/bin" "$tmp/c/pids"
cp "$bin/keyload-bench" "$bin/keyloadd" "$bin/keyload" "$tmp/bin/" || exit 2
bench=$tmp/bin/keyload-bench daemon=$tmp/bin/keyloadd cli=$tmp/bin/keyload
d=$tmp/c
declare -A mpid
perf_pid="" perf_fpid=""
stop_pid() {
  local p=$1
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  fi
  [ -n "$p" ] && { wait "$p"; } 2>/dev/null
}
cleanup() {
  stop_pid "$perf_pid"
  stop_pid "$perf_fpid"
  local k
  for k in "${!mpid[@]}"; do stop_pid "${mpid[$k]}"; done
  if [ $keep = 1 ]; then echo "rf3_lat: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in $port $((port + 1)) $((port + 2)) $((port + 100)) $((port + 101)) $((port + 102)); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "rf3_lat: port $p in use; set RF3_PORT"; exit 2; fi
done
"$daemon" keygen --cluster-secret-out "$tmp/cluster.secret" >/dev/null || exit 2
for n in p0m1 p0m2 p0m3; do "$daemon" keygen --secret-out "$d/$n.key" >"$d/$n.pub" || exit 2; done
python3 - "$root/deploy/local-rf3.json" "$d" "$port" <<'EOF' || exit 2
import json, sys
src, d, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open(src))
c["cluster"] = "bench-rf3lat"
c["replica_count"] = 3
c["insecure_local_admin"] = False
p0 = [p for p in c["partitions"] if p["id"] == 0][0]
c["partitions"] = [p0]
for i, m in enumerate(p0["members"]):
    m["client"] = "tcp://127.0.0.1:%d" % (port + i)
    m["peer"] = "tcp://127.0.0.1:%d" % (port + 100 + i)
    m["data"] = "%s/p0m%d" % (d, m["id"])
    m.pop("metrics", None)  # the seeds' metrics ports may be taken by another cluster
    m["public_key"] = open("%s/p0m%d.pub" % (d, m["id"])).read().strip()
json.dump(c, open(d + "/cluster.json", "w"), indent=2)
EOF
trace=()
if [ -n "${RF3_TRACE:-}" ]; then
  case $RF3_TRACE in ''|*[!0-9]*) echo "rf3_lat: RF3_TRACE must be a number of log indexes"; exit 2 ;; esac
  trace=(--repl-trace "$RF3_TRACE")
fi
urls="tcp://127.0.0.1:$port,tcp://127.0.0.1:$((port + 1)),tcp://127.0.0.1:$((port + 2))"
for n in p0m1 p0m2 p0m3; do
  "$daemon" --cluster "$d/cluster.json" --node "$n" --data "$d/$n" --cluster-secret "$tmp/cluster.secret" \
    --init-store --member-key "$d/$n.key" "${trace[@]}" 2>>"$d/$n.log" &
  mpid[$n]=$!
done
for n in p0m1 p0m2 p0m3; do
  for _ in $(seq 1 200); do grep -q 'msg="ready"' "$d/$n.log" 2>/dev/null && break; kill -0 "${mpid[$n]}" 2>/dev/null || break; sleep 0.1; done
  grep -q 'msg="ready"' "$d/$n.log" || { echo "rf3_lat: $n not ready"; tail -n 20 "$d/$n.log"; exit 1; }
done
ldr=$("$bench" --leader-of "$urls") || { echo "rf3_lat: no serving leader"; exit 1; }
echo "rf3_lat: cluster ready; $ldr"
adm() { timeout 60 "$cli" --cluster "$d/cluster.json" --database bench/kl3 --timeout 20000 "$@" >>"$d/setup.log" 2>&1; }
adm admin bootstrap --tenant bench --database kl3 --admin benchadmin --key-out "$d/admin.key" \
  --cluster-secret "$tmp/cluster.secret" || { echo "rf3_lat: bootstrap failed"; tail -n 5 "$d/setup.log"; exit 1; }
A=(--principal benchadmin --key "$d/admin.key")
adm "${A[@]}" queue create kl3 --partition 0 --max-messages 100000000 --max-bytes 107374182400 &&
  adm "${A[@]}" principal create benchpub --key-out "$d/pub.key" &&
  adm "${A[@]}" principal grant benchpub QueuePublish --queue kl3 || { echo "rf3_lat: setup failed"; tail -n 5 "$d/setup.log"; exit 1; }
pids="${mpid[p0m1]},${mpid[p0m2]},${mpid[p0m3]}"
ldr=$("$bench" --leader-of "$urls")
lnode=$(sed -n 's/.*node=\(p0m[0-9]\).*/\1/p' <<<"$ldr")
[ -n "$lnode" ] || lnode=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' <<<"$ldr" | head -n 1 | awk -v p="$port" '{print "p0m" ($1 - p + 1)}')
fnode=p0m1; [ "$lnode" = p0m1 ] && fnode=p0m2
echo "rf3_lat: leader $lnode ($ldr)"
sealed=(--cluster "$d/cluster.json" --principal benchpub --key "$d/pub.key" --database bench/kl3 --queue kl3
        --batch-size 1 --seconds "$secs")
# thread_cpu NODE...: "node tid comm ticks" for every thread of those members (/proc stat,
# utime + stime in clock ticks), to give each thread's share of a cell.
thread_cpu() {
  local n f
  for n in "$@"; do
    for f in /proc/"${mpid[$n]}"/task/*/stat; do
      awk -v n="$n" '{ s = $0; sub(/^[^(]*\(/, "", s); c = s; sub(/\).*$/, "", c); sub(/^[^)]*\) /, "", s); split(s, a, " ");
                      gsub(/ /, "_", c); print n, FILENAME, c, a[12] + a[13] }' "$f" 2>/dev/null
    done
  done
}
hz=$(getconf CLK_TCK)
# Bytes each member wrote to its disk so far (/proc/PID/io write_bytes: WAL, flushes and
# compactions alike), one "member bytes" line per member.
# The minor page faults each member took so far (/proc/PID/stat field 10) follow on the same
# line: memory the member touched for the first time, which this VM charges dearly.
disk_bytes() {
  local n
  for n in p0m1 p0m2 p0m3; do
    echo "$n $(awk '/^write_bytes:/ { print $2 }' /proc/"${mpid[$n]}"/io 2>/dev/null || echo 0)" \
      "$(awk '{ print $10 }' /proc/"${mpid[$n]}"/stat 2>/dev/null || echo 0)"
  done
}
sleep 3  # the setup's stage lines go out first
for r in $(seq 1 "$runs"); do
  for c in $cells; do
    declare -A mark
    for n in p0m1 p0m2 p0m3; do mark[$n]=$(wc -l <"$d/$n.log"); done
    if [ "${RF3_PERF:-0}" = 1 ]; then
      perf record -g -o "$tmp/perf-$c.data" -p "${mpid[$lnode]}" 2>"$tmp/perf-$c.err" &
      perf_pid=$!
      perf record -g -o "$tmp/perf-$c-f.data" -p "${mpid[$fnode]}" 2>"$tmp/perf-$c-f.err" &
      perf_fpid=$!
    fi
    thread_cpu p0m1 p0m2 p0m3 >"$tmp/tcpu0"
    disk_bytes >"$tmp/disk0"
    t0=$(date +%s%N)
    if [ "$c" = 0 ]; then
      sleep "$secs"; out="idle for $secs s"; : >"$tmp/bench.err"
    else
      load=(--clients "$c")
      [ "${RF3_PIPELINE:-0}" = 1 ] && load=(--clients 1 --in-flight "$c")
      out=$( { /usr/bin/time -f "bench_cpu_s=%U+%S" timeout $((secs * 3 + 120)) "$bench" "${sealed[@]}" "${load[@]}" --cpu-pids "$pids"; } 2>"$tmp/bench.err")
    fi
    t1=$(date +%s%N)
    thread_cpu p0m1 p0m2 p0m3 >"$tmp/tcpu1"
    disk_bytes >"$tmp/disk1"
    echo "rf3_lat: run $r RF3 sealed, $c in flight: ${out:-no result} $(grep -o 'bench_cpu_s=.*' "$tmp/bench.err")"
    # per thread: CPU share of the cell's wall time (%), the busiest first
    awk -v hz="$hz" -v wall="$(( (t1 - t0) / 1000000 ))" 'NR == FNR { a[$2] = $4; next }
        { d = ($4 - a[$2]) / hz * 1000 / wall * 100; if (d >= 2) printf "rf3_lat:   cpu %s %s %.0f%%\n", $1, $3, d }' \
        "$tmp/tcpu0" "$tmp/tcpu1" | sort -k5,5gr | head -n 24
    # per member: bytes written to disk and minor faults per acknowledged message of the cell
    msgs=$(echo "$out" | grep -o 'batches=[0-9]*' | head -n 1 | cut -d= -f2)
    if [ -n "$msgs" ] && [ "$msgs" -gt 0 ]; then
      awk -v m="$msgs" 'NR == FNR { a[$1] = $2; f[$1] = $3; next }
          { printf "rf3_lat:   disk %s write_bytes_per_msg=%.0f minflt_per_msg=%.3f\n", $1, ($2 - a[$1]) / m, ($3 - f[$1]) / m }' "$tmp/disk0" "$tmp/disk1"
    fi
    if [ -n "$perf_pid" ]; then
      kill -INT "$perf_pid" "$perf_fpid"; wait "$perf_pid" "$perf_fpid" 2>/dev/null; perf_pid="" perf_fpid=""
      for f in "perf-$c" "perf-$c-f"; do
        perf report -i "$tmp/$f.data" --no-children --percent-limit 0.7 --stdio 2>/dev/null | grep -v '^$' | head -n 400 >"$tmp/$f.txt"
        perf report -i "$tmp/$f.data" --children --sort sym --percent-limit 2 --stdio -g none 2>/dev/null | grep -v '^$' | grep '%' | head -n 80 >"$tmp/$f-children.txt"
      done
      echo "rf3_lat: perf of $lnode in $tmp/perf-$c.txt and perf-$c-children.txt, of follower $fnode in perf-$c-f*.txt"
    fi
    sleep 2.5  # the stage report runs about every 2 s
    for n in p0m1 p0m2 p0m3; do
      tail -n +"$((mark[$n] + 1))" "$d/$n.log" | grep 'replication stages' | sed "s/^/rf3_lat: $n /"
    done
    if [ ${#trace[@]} -gt 0 ]; then
      for n in p0m1 p0m2 p0m3; do tail -n +"$((mark[$n] + 1))" "$d/$n.log"; done | "$root/tests/bench/repl_trace.sh" | sed 's/^/rf3_lat: /'
    fi
  done
done
for n in p0m1 p0m2 p0m3; do kill -0 "${mpid[$n]}" 2>/dev/null || { echo "rf3_lat: $n died"; tail -n 20 "$d/$n.log"; exit 1; }; done
