#!/usr/bin/env bash
# snap_install.sh: time and peak RSS of a snapshot install of a large state between two
# members of a 3-member partition (replica_count 2).
#
#   tests/bench/snap_install.sh [--keyloadd BIN] [--mib N] [--work DIR] [--compressible]
#
# Starts three members (insecure_local_admin, snapshot threshold 100 / trailing 10), stops
# one follower (kill -9), fills about N MiB (default 256) of messages (16000-byte bodies of
# random bytes, 10 per batch, so the state on disk is about N MiB; --compressible sends the
# bench's repeating pattern instead, which RocksDB compresses about 16-fold) through the other two, which compact their logs past the stopped member,
# then resets the leader's peak RSS (/proc/PID/clear_refs 5), restarts the follower and
# waits until it caught up. Prints: the state size (du of the leader), the time from the
# restart to caught up, the stream's start/staged/installed times from the logs, and the
# peak RSS (VmHWM) of the leader during the install and of the receiver over its life, and
# a last "snap_install:" line with the figures and PASS/MISS against the memory target (each
# peak under 128 MiB). Members are killed by pid on exit.
set -u
cd "$(dirname "$0")/../.."
daemon=$PWD/bin/keyloadd mib=256 work="" body=--random-body
while [ $# -gt 0 ]; do
  case $1 in
    --keyloadd) daemon=$2; shift ;;
    --mib) mib=$2; shift ;;
    --work) work=$2; shift ;;
    --compressible) body="" ;;
    *) echo "snap_install: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
bench=$PWD/bin/keyload-bench
for b in "$daemon" "$bench"; do
  [ -x "$b" ] || { echo "snap_install: $b missing (make all)" >&2; exit 2; }
done
own=0
if [ -z "$work" ]; then work=$(mktemp -d /tmp/kl-snap-install.XXXXXX); own=1; fi
mkdir -p "$work"
pids=() dogs=()
# A directory this script made (not --work) goes with it: it holds the state three times.
cleanup() {
  disown -a 2>/dev/null  # no job report for each member killed below
  for p in "${dogs[@]}"; do pkill -9 -P "$p" 2>/dev/null; done
  for p in "${pids[@]}" "${dogs[@]}"; do kill -9 "$p" 2>/dev/null; done
  if [ "$own" = 1 ]; then
    for p in "${pids[@]}"; do
      for _ in $(seq 1 100); do
        { ! kill -0 "$p" 2>/dev/null || [ "$(ps -o stat= -p "$p" | cut -c1)" = Z ]; } && break
        sleep 0.05
      done
    done
    rm -rf "$work"
  fi
}
trap cleanup EXIT

base=$((12000 + ($$ % 90) * 10))   # clients base..base+2, peers base+5..base+7
urls=()
{
  printf '{"cluster":"sinst","replica_count":2,"insecure_local_admin":true,'
  printf '"timers":{"tick_ms":50,"election_ms":2000,"heartbeat_ms":300},'
  printf '"snapshot":{"threshold_entries":100,"trailing_entries":10},'
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
# keyloadd itself is the child (kill -9 by pid must reach it, not a wrapper); a watchdog
# bounds its lifetime.
start() {
  "$daemon" --cluster "$work/cluster.json" --node "p0m$1" --cluster-secret "$work/cluster.secret" \
    --init-store 2>>"$work/m$1.log" &
  pids[$1]=$!
  ( sleep 3600; kill -9 "${pids[$1]}" ) 2>/dev/null &
  dogs+=($!)
}
for i in 1 2 3; do start "$i"; done
all=$(IFS=,; echo "${urls[*]}")
line=$("$bench" --leader-of "$all") || { echo "snap_install: no leader"; exit 1; }
leader=$(echo "$line" | sed -n 's/.* member=\([0-9]*\) .*/\1/p')
[ -n "$leader" ] && [ "$leader" -ge 1 ] && [ "$leader" -le 3 ] || { echo "snap_install: leader? $line"; exit 1; }
f=$(( leader % 3 + 1 ))
kill -9 "${pids[$f]}"; wait "${pids[$f]}" 2>/dev/null
others=()
for i in 1 2 3; do [ "$i" -ne "$f" ] && others+=("${urls[$((i - 1))]}"); done
two=$(IFS=,; echo "${others[*]}")
batches=$(( mib * 1024 * 1024 / (10 * 16000) + 1 ))
t0=$(date +%s.%N)
"$bench" --url "$two" --clients 2 --batch-size 10 --body-size 16000 --ops "$batches" --queue big $body \
  --timeout-ms 30000 >"$work/fill.out" 2>"$work/fill.log" || { echo "snap_install: fill failed"; tail -n 5 "$work/fill.log"; exit 1; }
t1=$(date +%s.%N)
"$bench" --wait-caught-up "$two" >/dev/null
sync
state=$(du -sb "$work/m$leader" | cut -f1)
echo 5 > "/proc/${pids[$leader]}/clear_refs" 2>/dev/null || echo "snap_install: cannot reset the leader's peak RSS"
lrss0=$(awk '/VmRSS/{print $2}' "/proc/${pids[$leader]}/status")
r0=$(date +%s.%N)
start "$f"
"$bench" --wait-caught-up "$all" >/dev/null
r1=$(date +%s.%N)
lhwm=$(awk '/VmHWM/{print $2}' "/proc/${pids[$leader]}/status")
fhwm=$(awk '/VmHWM/{print $2}' "/proc/${pids[$f]}/status")
echo "snap_install: keyloadd=$daemon target_mib=$mib fill_s=$(echo "$t1 - $t0" | bc) leader=m$leader receiver=m$f"
echo "state: leader du=$state bytes ($((state / 1048576)) MiB), receiver du after=$(du -sb "$work/m$f" | cut -f1)"
echo "restart to caught up: $(echo "$r1 - $r0" | bc) s"
grep -h "snapshot stream started\|snapshot stream ended" "$work/m$leader.log" | tail -n 2 | cut -c1-220
grep -h "snapshot staged\|snapshot installed" "$work/m$f.log" | tail -n 2 | cut -c1-220
echo "peak RSS: leader during the install ${lhwm} kB (RSS before ${lrss0} kB), receiver over its life ${fhwm} kB"
# The target (ARCHITECTURE.md "Snapshots and log compaction"): memory bounded by the chunk
# window, not the state: each peak under 128 MiB, an eighth of a 1 GiB state.
verdict=PASS
[ -n "$lhwm" ] && [ -n "$fhwm" ] && [ "$lhwm" -lt 131072 ] && [ "$fhwm" -lt 131072 ] || verdict=MISS
echo "snap_install: state_mib=$((state / 1048576)) install_s=$(echo "$r1 - $r0" | bc) leader_hwm_kb=$lhwm" \
     "receiver_hwm_kb=$fhwm target rss<131072kB $verdict"
