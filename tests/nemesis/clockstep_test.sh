#!/usr/bin/env bash
# A one-member keyloadd whose wall clock steps (libfaketime, FAKETIME_TIMESTAMP_FILE read on
# every call, FAKETIME_DONT_FAKE_MONOTONIC=1 so CLOCK_MONOTONIC/CLOCK_BOOTTIME stay real),
# checked through the CLI on the real clock. A request carries its remaining budget, which
# the member measures from arrival on its own clock (common/rpc.c), so the CLI's ordinary
# timeouts work against a member an hour ahead or behind (checked in 1 and 3 with
# cluster-status's 500 ms). (The CLI itself cannot run under libfaketime: its connects
# then fail at once.)
#  1. +1 h: a message leased for 30 s just before is not redelivered, and a message whose
#     expiry (60 s ahead) falls inside that hour is still delivered;
#  2. back to the real clock (-1 h): partition time does not stand still: a 5 s lease
#     granted after the correction runs out after about 5 s of real time;
#  3. -1 h below the real clock: the same;
#  4. the 30 s lease of (1) runs out neither before 29 s nor after 33 s of real time;
#  5. kill -9 and restart with the clock +1 h: a message expiring 20 s ahead is delivered
#     (a restarted member resumes from its last entry time).
# Entry time is bounded by CLOCK_BOOTTIME (daemon/entry_clock.h), so none of this depends on
# the wall clock. Prints timings. Ports: two free ones in 14500-14999 picked from the pid;
# the member is stopped by pid on every exit and the temporary directory removed, with the
# /dev/shm files libfaketime made for each member pid (it leaves them after a kill -9).
#   bash tests/nemesis/clockstep_test.sh      (after make all)
# KEYLOADD=PATH runs another keyloadd binary (to see the test fail on one without the bound).
set -u
cd "$(dirname "$0")/../.."
keyloadd=${KEYLOADD:-bin/keyloadd}
faketime_lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/clockstep-test-XXXXXX")
d_pid=
all_pids=()
# libfaketime keeps its state in /dev/shm/faketime_shm_PID and sem.faketime_sem_PID, named by
# the pid of the process it is loaded into, and removes them only on a normal exit: after a
# kill -9 they stay. Each member's are removed here, and nobody else's.
drop_faketime_shm() {
  local p
  for p in "${all_pids[@]}"; do rm -f "/dev/shm/faketime_shm_$p" "/dev/shm/sem.faketime_sem_$p"; done
}
cleanup() {
  [ -n "$d_pid" ] && kill -KILL "$d_pid" 2>/dev/null && wait "$d_pid" 2>/dev/null
  drop_faketime_shm
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' TERM INT
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

[ -r "$faketime_lib" ] || { bad "libfaketime missing ($faketime_lib; Debian package faketime)"; finish; }
[ -x "$keyloadd" ] && [ -x bin/keyload ] || { bad "build first: make all"; finish; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=
for i in $(seq 0 249); do
  p=$(( 14500 + (($$ + i) % 250) * 2 ))
  listening "$p" || listening $((p + 1)) || { port=$p; break; }
done
[ -n "$port" ] || { bad "no two free ports in 14500-14999"; finish; }
cfg="$tmp/cluster.json"
cat >"$cfg" <<JSON
{"cluster":"clockstep$$","replica_count":1,"insecure_local_admin":true,
 "partitions":[{"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$port","peer":"tcp://127.0.0.1:$((port + 1))"}]}]}
JSON
bin/keyloadd keygen --cluster-secret-out "$tmp/cluster.secret" >/dev/null || { bad "keygen"; finish; }
offset="$tmp/faketime"
kl() { timeout -k 2 20 bin/keyload --cluster "$cfg" --timeout 10000 "$@"; }
step() { echo "$1" >"$offset"; echo "     member clock now $1 s"; }
step +0
first=
"$keyloadd" --help 2>&1 | grep -q -- "--init-store" && first=--init-store
start_member() { # [FLAG]: starts the member under libfaketime, waits (15 s) until it serves
  # env execs keyloadd: $! is the member's own pid
  env LD_PRELOAD=$faketime_lib FAKETIME_TIMESTAMP_FILE="$offset" FAKETIME_NO_CACHE=1 \
    FAKETIME_DONT_FAKE_MONOTONIC=1 "$keyloadd" --cluster "$cfg" --node p0m1 --data "$tmp/p0m1" \
    --var "$tmp/var" --cluster-secret "$tmp/cluster.secret" ${1:-} >>"$tmp/p0m1.log" 2>&1 &
  d_pid=$!
  all_pids+=("$d_pid")
  for _ in $(seq 1 150); do
    kl --json cluster-status 2>/dev/null | grep -q '"serving":true' && return 0
    sleep 0.1
  done
  return 1
}
start_member "$first"
kl database create >/dev/null && kl queue create jobs >/dev/null ||
  { bad "member did not serve: $(tail -3 "$tmp/p0m1.log")"; finish; }

# receive LEASE_MS: the bodies received now, sorted, one line each
recv() { kl --json receive jobs --max 10 --lease-ms "$1" | jq -r '.results[0].messages[].body_utf8' | sort; }
one_line() { tr '\n' ' ' | sed 's/ $//'; }
wait_until() { local d=$(( $1 - $(ms) )); [ "$d" -gt 0 ] && sleep "$((d / 1000)).$(printf %03d $((d % 1000)))"; }

echo "--- 1. +1 h"
kl enqueue jobs A >/dev/null
got=$(recv 30000 | one_line); t_lease=$(ms)
[ "$got" = A ] && ok "A leased for 30 s" || bad "lease A: got '$got'"
kl enqueue jobs --expires-at-ms $(( $(ms) + 60000 )) B >/dev/null || bad "enqueue B with expiry"
step +3600
kl --json cluster-status 2>/dev/null | grep -q '"serving":true' &&
  ok "a member 1 h ahead answers cluster-status's 500 ms requests" ||
  bad "a member 1 h ahead does not answer cluster-status (deadline compared across clocks?)"
kl enqueue jobs C >/dev/null || bad "enqueue C after the step"
got=$(recv 5000 | one_line); t_short=$(ms)
[ "$got" = "B C" ] &&
  ok "after +1 h: A's lease holds, B (expiry 60 s ahead) is delivered: got '$got'" ||
  bad "after +1 h: want 'B C' (A still leased, B not expired), got '$got'"

echo "--- 2. back to the real clock"
step +0
wait_until $((t_short + 5600))
got=$(recv 5000 | one_line); t_short=$(ms)
[ "$got" = "B C" ] && ok "after -1 h: 5 s leases ran out after 5.6 s: partition time moves" ||
  bad "after -1 h: want 'B C' redelivered after their 5 s lease, got '$got'"

echo "--- 3. -1 h below the real clock"
step -3600
kl --json cluster-status 2>/dev/null | grep -q '"serving":true' &&
  ok "a member 1 h behind answers cluster-status's 500 ms requests" ||
  bad "a member 1 h behind does not answer cluster-status"
wait_until $((t_short + 5600))
got=$(recv 5000 | one_line)
[ "$got" = "B C" ] && ok "at -1 h: 5 s leases ran out after 5.6 s" ||
  bad "at -1 h: want 'B C' redelivered, got '$got'"
step +0

echo "--- 4. A's 30 s lease, granted before the steps, in real time"
wait_until $((t_lease + 29000))
got=$(recv 1000 | one_line)
case " $got " in *" A "*) bad "A redelivered $(( $(ms) - t_lease )) ms after its 30 s lease: early" ;;
  *) ok "A not redelivered 29 s into its 30 s lease" ;; esac
found=
while [ $(( $(ms) - t_lease )) -lt 33000 ]; do
  got=$(recv 1000 | one_line)
  case " $got " in *" A "*) found=$(( $(ms) - t_lease )); break ;; esac
  sleep 0.3
done
[ -n "$found" ] && ok "A redelivered $found ms after its 30 s lease was granted" ||
  bad "A not redelivered within 33 s of its 30 s lease: partition time lags"
kill -0 "$d_pid" 2>/dev/null && ok "member still running" || bad "member died: $(tail -3 "$tmp/p0m1.log")"

echo "--- 5. a member restarted with its clock +1 h resumes from its last entry time"
kl enqueue jobs --expires-at-ms $(( $(ms) + 20000 )) E >/dev/null || bad "enqueue E with expiry"
step +3600
kill -KILL "$d_pid"; wait "$d_pid" 2>/dev/null; d_pid=
t0=$(ms)
start_member || bad "member did not serve after restart: $(tail -3 "$tmp/p0m1.log")"
echo "     member serving $(( $(ms) - t0 )) ms after restart"
got=$(recv 30000 | one_line)
case " $got " in *" E "*) ok "after kill -9 and restart at +1 h, E (expiry 20 s ahead) is delivered: got '$got'" ;;
  *) bad "after restart at +1 h, E (expiry 20 s ahead) is gone: got '$got'" ;; esac
step +0
finish
