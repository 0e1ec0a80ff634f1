#!/usr/bin/env bash
# Where a member's synced log writes run (ARCHITECTURE.md "Replication", Driver): an RF3
# partition started by deploy/keyload-cluster, each member serving /metrics on loopback.
# With a quick disk, most log writes of a follower run on its loop and none of the
# leader's do (keyload_raft_log_writes_on_loop_total against _log_writes_total, over N
# enqueues). Then one follower is restarted with every log write slowed by 5 ms (failpoint
# store.log_write=sleep(5), over the 2 ms bound): its writes go to the log writer thread
# (at most the first one after the start runs on the loop), it still writes every entry,
# and the partition still commits every enqueue. Ports 31800-31997 (the process tests'
# range, below the ephemeral one), six per run from the pid; every process is stopped by the launcher's pid files on
# exit, and the work directory is removed.
set -u
cd "$(dirname "$0")/../.." || exit 1
name="slowfollower$$"
base=$(( 31800 + ($$ % 33) * 6 ))   # clients base..+2, peers +3..+5; metrics 127.0.0.3:base..+2
mkdir -p var
work=$(mktemp -d "$PWD/var/slowfollower-XXXXXX")
cfg="$work/cluster.json"
passed=0 failed=0
t0=$(date +%s)
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
kc() { timeout -k 5 60 deploy/keyload-cluster --config "$cfg" "$@"; }
cleanup() {
  kc down >/dev/null 2>&1
  rm -rf "var/$name" "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

cat >"$cfg" <<JSON
{"cluster":"$name","replica_count":3,"timers":{"tick_ms":50,"election_ms":800,"heartbeat_ms":150},
 "partitions":[{"id":0,"members":[
  {"id":1,"client":"tcp://127.0.0.1:$base","peer":"tcp://127.0.0.1:$((base + 3))","metrics":"127.0.0.3:$base"},
  {"id":2,"client":"tcp://127.0.0.1:$((base + 1))","peer":"tcp://127.0.0.1:$((base + 4))","metrics":"127.0.0.3:$((base + 1))"},
  {"id":3,"client":"tcp://127.0.0.1:$((base + 2))","peer":"tcp://127.0.0.1:$((base + 5))","metrics":"127.0.0.3:$((base + 2))"}]}]}
JSON
murl() { echo "http://127.0.0.3:$((base + $1 - 1))/metrics"; }
# metric N SERIES: the value of a series of member N (its name and labels as the page prints
# them), or "missing"
metric() {
  local v
  v=$(curl -s --max-time 5 "$(murl "$1")" | awk -v k="$2" '$1 == k { print $2; exit }')
  echo "${v:-missing}"
}
finish() { echo "slow_follower.sh: $passed passed, $failed failed in $(( $(date +%s) - t0 )) s"; [ $failed = 0 ]; exit $?; }

if ! kc up >/dev/null; then bad "cluster up"; tail -n 5 "var/$name"/*.log; finish; fi
ok "cluster up"
keys="$work/keys"; mkdir -p "$keys"; chmod 700 "$keys"
kl() { timeout -k 5 60 ./bin/keyload --cluster "var/$name/cluster.json" "$@"; }
kl admin bootstrap --tenant default --database first --admin slowroot --key-out "$keys/root.key" >/dev/null || bad "bootstrap"
export KEYLOAD_PRINCIPAL=slowroot KEYLOAD_KEY="$keys/root.key"
kl database create >/dev/null || bad "database create"
kl queue create jobs >/dev/null || bad "queue create"

leader=""
for n in 1 2 3; do [ "$(metric $n 'keyload_raft_role{role="leader"}')" = 1 ] && leader=$n; done
[ -n "$leader" ] && ok "leader is p0m$leader" || { bad "no member reports role leader"; finish; }

declare -A w0 l0
snap() { for n in 1 2 3; do w0[$n]=$(metric $n keyload_raft_log_writes_total); l0[$n]=$(metric $n keyload_raft_log_writes_on_loop_total); done; }
# enqueue N: N enqueues, each its own batch and so at least one log write on every member
enqueue() {
  local i good=0
  for i in $(seq 1 "$1"); do kl enqueue jobs "body-$2-$i" >/dev/null && good=$((good + 1)); done
  echo $good
}
# settled N WANT_WRITES: waits (up to 10 s) until member N's log writes rose by WANT_WRITES
settled() {
  local w
  for _ in $(seq 1 100); do
    w=$(metric "$1" keyload_raft_log_writes_total)
    [ "$w" != missing ] && [ $((${w%.*} - ${w0[$1]%.*})) -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# ---- a quick disk: followers write on their loops, the leader on its thread
N=20
snap
for n in 1 2 3; do [ "${w0[$n]}" != missing ] && [ "${l0[$n]}" != missing ] || bad "p0m$n: the log write series are missing"; done
got=$(enqueue $N quick)
[ "$got" = $N ] && ok "$N enqueues committed" || bad "only $got of $N enqueues committed"
for n in 1 2 3; do
  settled $n $N || bad "p0m$n wrote fewer than $N times"
  w=$(metric $n keyload_raft_log_writes_total) l=$(metric $n keyload_raft_log_writes_on_loop_total)
  dw=$((${w%.*} - ${w0[$n]%.*})) dl=$((${l%.*} - ${l0[$n]%.*}))
  if [ $n = "$leader" ]; then
    [ $dw -ge $N ] && [ $dl = 0 ] && ok "leader p0m$n: $dw writes, none on its loop" ||
      bad "leader p0m$n: $dw writes, $dl on its loop (want >= $N, 0)"
  else
    # Most, not all: a write that took over 2 ms (this machine busy, a memtable switch) sends
    # the next one to the thread; one in flight may be counted as started, not completed.
    [ $dw -ge $N ] && [ $((2 * dl)) -ge $dw ] && [ $dl -le $((dw + 1)) ] && ok "follower p0m$n: $dw writes, $dl on its loop" ||
      bad "follower p0m$n: $dw writes, $dl on its loop (want at least half)"
  fi
done

# ---- a slow disk on one follower: its writes leave the loop, the partition still commits
slow=$(( leader % 3 + 1 ))   # a follower
kc kill "p0m$slow" >/dev/null || bad "kill p0m$slow"
KEYLOAD_FAILPOINTS='store.log_write=sleep(5)' kc start "p0m$slow" >/dev/null &&
  ok "p0m$slow restarted with every log write slowed by 5 ms" || bad "restart p0m$slow slowed"
for _ in $(seq 1 100); do [ "$(metric "$slow" keyload_raft_log_writes_total)" != missing ] && break; sleep 0.1; done
snap
got=$(enqueue $N slow)
[ "$got" = $N ] && ok "$N enqueues committed with p0m$slow slow" || bad "only $got of $N enqueues committed with p0m$slow slow"
settled "$slow" $N && ok "p0m$slow still wrote every entry (>= $N writes)" || bad "p0m$slow wrote fewer than $N times"
w=$(metric "$slow" keyload_raft_log_writes_total) l=$(metric "$slow" keyload_raft_log_writes_on_loop_total)
[ "$l" != missing ] && [ "${l%.*}" -le 1 ] && ok "p0m$slow: ${l%.*} of ${w%.*} writes since its start on its loop (at most the first)" ||
  bad "p0m$slow: $l of $w writes on its loop with a 5 ms disk (want <= 1)"
finish
