#!/usr/bin/env bash
# restart_pending.sh: how long a member, and a whole partition, take to serve again after
# kill -9 when the partition holds N pending messages (default 10^6, 100-byte bodies).
#
#   tests/bench/restart_pending.sh [--keyloadd BIN] [--messages N] [--work DIR]
#
# One partition of three members, replica_count 3 (every write needs all three, so the
# partition takes writes again only once the restarted member does), insecure_local_admin,
# default snapshot policy, election timer 1000 ms. Fills N pending messages (random
# 100-byte bodies, 1000 per batch, 2 clients), then:
#   member:    kill -9 a follower, start it again, and time from the exec to its first
#              MemberStatus answer, to its having applied the leader's commit index, and to
#              the first enqueue acknowledged and QueueStats answered by the partition's
#              leader (keyload-bench --serve-probe);
#   leader:    the same for the leader (the others elect a new one meanwhile);
#   partition: kill -9 all three members, start them again, the same times (the first
#              member started is the one watched).
# Prints one "restart_pending:" line per case with the figures, the target (serving, the
# later of the write and the read, within 5000 ms of the exec) and PASS/MISS, and the time
# each restarted member logged from its first line to "ready" (its store open, its port served). Exit 0 when every case
# ran (a MISS is reported, not fatal), 1 when one could not run. Members are killed by pid on
# exit; the work directory (a new /tmp/kl-restart-pending.* unless --work) is left for
# inspection and removed only when this script created it and every case ran.
set -u
cd "$(dirname "$0")/../.."
daemon=$PWD/bin/keyloadd messages=1000000 work="" own=0
while [ $# -gt 0 ]; do
  case $1 in
    --keyloadd) daemon=$2; shift ;;
    --messages) messages=$2; shift ;;
    --work) work=$2; shift ;;
    *) echo "restart_pending: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
bench=$PWD/bin/keyload-bench
for b in "$daemon" "$bench"; do
  [ -x "$b" ] || { echo "restart_pending: $b missing (make all)" >&2; exit 2; }
done
if [ -z "$work" ]; then work=$(mktemp -d /tmp/kl-restart-pending.XXXXXX); own=1; fi
mkdir -p "$work"
pids=() dogs=()
# A watchdog's sleep is its child: killed by parent pid first, or it outlives the run.
cleanup() {
  for p in "${dogs[@]}"; do pkill -9 -P "$p" 2>/dev/null; done
  for p in "${pids[@]}" "${dogs[@]}"; do kill -9 "$p" 2>/dev/null; done
}
trap cleanup EXIT

base=$((13000 + ($$ % 90) * 10))   # clients base..base+2, peers base+5..base+7
urls=()
{
  printf '{"cluster":"rpend","replica_count":3,"insecure_local_admin":true,'
  printf '"timers":{"tick_ms":50,"election_ms":1000,"heartbeat_ms":200},'
  printf '"limits":{"DefaultQueueMaxMessages":%d},' $((messages + 1000))
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
# keyloadd itself is the child (kill -9 by pid must reach it); a watchdog bounds its life.
# Both are disowned: the shell would report every kill -9 of a job.
start() {
  local init=""
  [ -d "$work/m$1" ] || init=--init-store
  "$daemon" --cluster "$work/cluster.json" --node "p0m$1" --cluster-secret "$work/cluster.secret" \
    $init 2>>"$work/m$1.log" &
  pids[$1]=$!
  disown "${pids[$1]}"
  ( sleep 3600; kill -9 "${pids[$1]}" ) 2>/dev/null &
  dogs+=($!)
  disown $!
}
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ]; }
stop9() {
  kill -9 "${pids[$1]}" 2>/dev/null
  for _ in $(seq 1 200); do gone "${pids[$1]}" && return 0; sleep 0.01; done
}
now_ms() { date +%s%3N; }
all=$(IFS=,; echo "${urls[*]}")
for i in 1 2 3; do start "$i"; done
"$bench" --leader-of "$all" >/dev/null || { echo "restart_pending: no leader"; exit 1; }

batches=$(( (messages + 999) / 1000 ))
t0=$(now_ms)
"$bench" --url "$all" --clients 2 --batch-size 1000 --body-size 100 --ops "$batches" --queue pend \
  --random-body --timeout-ms 60000 >"$work/fill.out" 2>"$work/fill.log" ||
  { echo "restart_pending: fill failed"; tail -n 5 "$work/fill.log"; exit 1; }
fill_s=$(( ($(now_ms) - t0) / 1000 ))
"$bench" --wait-caught-up "$all" >/dev/null || { echo "restart_pending: not caught up after the fill"; exit 1; }
errors=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' "$work/fill.out")
echo "restart_pending: keyloadd=$daemon messages=$((batches * 1000)) (fill errors ${errors:-?}) fill_s=$fill_s" \
     "du_leader=$(du -sm "$work/m1" | cut -f1) MiB"

leader_no() {
  local line
  line=$("$bench" --leader-of "$all") || return 1
  echo "$line" | sed -n 's/.* member=\([0-9]*\) .*/\1/p'
}
# The log of member $1 from line $2 on: ms from its first line (the process's first log
# line, "keys loaded") to its "ready" line (store open, replication started, client port
# served), or "?" when either is missing.
logged_ms() {
  tail -n +"$2" "$work/m$1.log" | awk '
    NR == 1 { s = $1 }
    /msg="ready"/ && !e { e = $1 }
    END { print s " " e }' | while read -r a b; do
      if [ -n "$a" ] && [ -n "$b" ]; then
        echo $(( $(date -d "${b#ts=}" +%s%3N) - $(date -d "${a#ts=}" +%s%3N) ))
      else echo "?"; fi
    done
}
ran=0 missed=0
# case NAME MEMBER...: kill -9 the members, start them again (the first is watched), probe.
run_case() {
  local name=$1 m line t serve verdict
  shift
  local -a mark=()
  for m in "$@"; do stop9 "$m"; done
  sleep 0.5
  local order=("$@") rest=()
  for i in 1 2 3; do
    local in=0
    for m in "$@"; do [ "$m" = "$i" ] && in=1; done
    [ $in = 0 ] && rest+=("${urls[$((i - 1))]}")
  done
  local watched=${urls[$((order[0] - 1))]}
  local probe_urls
  probe_urls=$(IFS=,; echo "$watched,${rest[*]}")
  for m in "${order[@]:1}"; do probe_urls="$probe_urls,${urls[$((m - 1))]}"; done
  for m in "$@"; do mark[$m]=$(( $(wc -l <"$work/m$m.log") + 1 )); done
  t=$(now_ms)
  for m in "$@"; do start "$m"; done
  line=$("$bench" --serve-probe "$probe_urls" --since-ms "$t" --queue pend --timeout-ms 5000) ||
    { echo "restart_pending: $name: not serving within 60 s"; return 1; }
  local w r
  w=$(echo "$line" | sed -n 's/.* write_ms=\([0-9]*\).*/\1/p')
  r=$(echo "$line" | sed -n 's/.* read_ms=\([0-9]*\).*/\1/p')
  serve=$(( w > r ? w : r ))
  verdict=PASS
  [ "$serve" -le 5000 ] || { verdict=MISS; missed=$((missed + 1)); }
  local logs=""
  for m in "$@"; do logs="$logs m$m:$(logged_ms "$m" "${mark[$m]}")ms"; done
  echo "restart_pending: case=$name restarted=$(printf 'm%s ' "$@")watched=m${order[0]} ${line#serve: }" \
       "serving_ms=$serve target<=5000 $verdict (first log line to ready:$logs)"
  "$bench" --wait-caught-up "$all" >/dev/null || { echo "restart_pending: $name: not caught up"; return 1; }
  ran=$((ran + 1))
}
l=$(leader_no) || { echo "restart_pending: no leader"; exit 1; }
run_case member $(( l % 3 + 1 )) || exit 1
l=$(leader_no) || { echo "restart_pending: no leader"; exit 1; }
run_case leader "$l" || exit 1
run_case partition 1 2 3 || exit 1
echo "restart_pending: $ran cases ran, $missed missed the 5 s target"
if [ "$own" = 1 ]; then cleanup; rm -rf "$work"; fi
exit 0
