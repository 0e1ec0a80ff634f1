#!/usr/bin/env bash
# `make install` and the systemd units it installs, without systemd: installs into a temporary
# prefix, checks the files and `systemd-analyze verify` (and that the check can fail), then
# runs an RF3 partition from the units' own ExecStart/ExecStartPost lines as installed (with
# %i and $$ expanded as systemd would, and a NOTIFY_SOCKET listener standing in for the
# manager): READY=1 and STOPPING=1 arrive, the first start creates the store and the marker,
# a restart runs without --init-store and is awaited with `keyload cluster-status
# --wait-ready`, a wiped member is refused, and --wait-ready's refusals. Ports 33000-33499;
# every process it starts is stopped on exit by pid; it deletes only its temporary directory.
set -u
cd "$(dirname "$0")/../.." || exit 1
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ]; }

tmp=$(mktemp -d /tmp/kl-install-XXXXXX)
declare -A pid=()
listener=
cleanup() {
  local p
  for p in "${pid[@]}" $listener; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 100); do
    local left=0
    for p in "${pid[@]}" $listener; do gone "$p" || left=1; done
    [ $left -eq 0 ] && break
    sleep 0.05
  done
  for p in "${pid[@]}" $listener; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

prefix=$tmp/usr etc=$tmp/etc/keyload state=$tmp/var/lib/keyload
units=$prefix/lib/systemd/system
if ! make -s install PREFIX="$prefix" SYSCONFDIR="$etc" STATEDIR="$state" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"; bad "make install"; echo "$passed passed, $failed failed"; exit 1
fi
ok "make install"
for p in keyloadd keyload keyload-coordinator keyload-mcp; do
  check "$p installed, mode 755, with a man page" \
    test "$(stat -c %a "$prefix/bin/$p" 2>/dev/null)" = 755 -a -s "$prefix/share/man/man1/$p.1"
done
check "man page holds the --help text" grep -q -- '--init-store' "$prefix/share/man/man1/keyloadd.1"
check "units installed, mode 644" test "$(stat -c %a "$units/keyloadd@.service")" = 644 -a \
  "$(stat -c %a "$units/keyload-coordinator.service")" = 644
check "no placeholder left in the units" sh -c "! grep -q '@[A-Z]*@' '$units'/*.service '$prefix/lib/sysusers.d/keyload.conf'"
check "units name the installed paths" grep -q "$prefix/bin/keyloadd.*$etc/cluster.json.*$state/%i" "$units/keyloadd@.service"
check "make install refuses a relative SYSCONFDIR" sh -c "! make -s install PREFIX='$tmp/x' SYSCONFDIR=etc >/dev/null 2>&1"

# systemd-analyze verify prints its findings and still exits 0: both must be clean.
verify() { local out; out=$(cd "$tmp" && systemd-analyze verify --man=no "$@" 2>&1); [ $? -eq 0 ] && [ -z "$out" ] || { echo "$out"; return 1; }; }
mkdir -p "$tmp/verify"
cp "$units/keyloadd@.service" "$tmp/verify/keyloadd@p0m1.service"
cp "$units/keyload-coordinator.service" "$tmp/verify/"
check "systemd-analyze verify: member and coordinator units" verify "$tmp/verify/keyloadd@p0m1.service" "$tmp/verify/keyload-coordinator.service"
sed 's/^NoNewPrivileges=yes/NoNewPrivilegez=yes/' "$units/keyload-coordinator.service" >"$tmp/verify/broken.service"
fails() { ! "$@" >/dev/null 2>&1; }
check "the verify check fails on a broken unit (control)" fails verify "$tmp/verify/broken.service"

# An RF3 partition with keys, laid out as the guide says.
base=$(( 30000 + ($$ % 50) * 10 ))   # below the ephemeral range (32768 on Linux): no client connection holds it
mkdir -p "$etc" "$state"
bin=$prefix/bin
"$bin/keyloadd" keygen --cluster-secret-out "$etc/cluster.secret" >/dev/null
members='[]'
for m in 1 2 3; do
  pub=$("$bin/keyloadd" keygen --secret-out "$etc/p0m$m.key")
  members=$(jq --argjson m $m --arg pub "$pub" --argjson base $base \
    '. + [{id: $m, client: "tcp://127.0.0.1:\($base + $m)", peer: "tcp://127.0.0.1:\($base + 4 + $m)", public_key: $pub}]' <<<"$members")
done
jq -n --argjson members "$members" '{cluster: "installtest", replica_count: 3, partitions: [{id: 0, members: $members}]}' >"$etc/cluster.json"

# The manager's notify socket: every datagram becomes a line of notify.log.
python3 -u -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    sys.stdout.write(s.recv(4096).decode().replace("\n", " ") + "\n")
' "$tmp/notify.sock" >"$tmp/notify.log" 2>&1 &
listener=$!
for _ in $(seq 1 100); do [ -S "$tmp/notify.sock" ] && break; sleep 0.05; done

# line KEY NODE: the unit's KEY= line with %i and $$ expanded, ready for eval.
line() { sed -n "s/^$1=//p" "$units/keyloadd@.service" | sed -e "s/%i/$2/g" -e 's/\$\$/$/g'; }
start() { # start NODE: ExecStart in the background, as systemd would run it
  (export NOTIFY_SOCKET="$tmp/notify.sock"; eval "exec $(line ExecStart "$1")") >>"$tmp/$1.log" 2>&1 &
  pid[$1]=$!
}
notified() { grep -c "^$1" "$tmp/notify.log" 2>/dev/null || true; }
await_ready() { # await_ready COUNT: COUNT READY=1 datagrams in all
  for _ in $(seq 1 300); do [ "$(notified READY=1)" -ge "$1" ] && return 0; sleep 0.05; done
  return 1
}
for m in 1 2 3; do start p0m$m; done
if await_ready 3; then
  ok "READY=1 from each member started by the unit's ExecStart"
else
  bad "READY=1 from each member started by the unit's ExecStart"
  for m in 1 2 3; do echo "  p0m$m.log:"; tail -n 5 "$tmp/p0m$m.log" | sed 's/^/    /'; done
fi
for m in 1 2 3; do eval "$(line ExecStartPost p0m$m)"; done
check "first start: stores created, markers left" test -s "$state/p0m1/CURRENT" -a -e "$state/p0m1.initialized" \
  -a -e "$state/p0m2.initialized" -a -e "$state/p0m3.initialized"
check "the first start passed --init-store" sh -c "ps -o args= -p ${pid[p0m1]} | grep -q -- --init-store"
kl() { timeout 70 "$bin/keyload" --cluster "$etc/cluster.json" "$@"; }
check "cluster-status --wait-ready p0m2 after the first start" kl cluster-status --wait-ready p0m2 --wait-ms 30000
check "cluster-status shows a leader" sh -c "timeout 20 '$bin/keyload' --cluster '$etc/cluster.json' cluster-status --json | jq -e '.partitions[0].leader != null' >/dev/null"

# Rolling restart of p0m2: SIGTERM (systemctl stop), ExecStart again, await readiness.
kill -TERM "${pid[p0m2]}"
for _ in $(seq 1 200); do gone "${pid[p0m2]}" && break; sleep 0.05; done
check "restart: the member stopped on SIGTERM and said STOPPING=1" sh -c "! kill -0 ${pid[p0m2]} 2>/dev/null && [ $(notified STOPPING=1) -ge 1 ]"
start p0m2
check "restart: READY=1 again" await_ready 4
check "restart: no --init-store once the marker exists" sh -c "! ps -o args= -p ${pid[p0m2]} | grep -q -- --init-store"
out=$(kl cluster-status --wait-ready p0m2 --wait-ms 30000 2>&1); rc=$?
check "restart: --wait-ready p0m2 exits 0 once it caught up ($out)" test $rc -eq 0

# A wiped member is refused instead of coming back as a new member.
kill -TERM "${pid[p0m3]}"
for _ in $(seq 1 200); do gone "${pid[p0m3]}" && break; sleep 0.05; done
rm -rf "${state:?}/p0m3"
( eval "exec $(line ExecStart p0m3)" ) >>"$tmp/p0m3.log" 2>&1 &
wiped=$!
for _ in $(seq 1 200); do gone $wiped && break; sleep 0.05; done
wait $wiped 2>/dev/null; rc=$?
check "a wiped member's start is refused with exit 2 (got $rc)" test "$rc" -eq 2
unset 'pid[p0m3]'

out=$(kl cluster-status --wait-ready p0m3 --wait-ms 1000 2>&1); rc=$?
echo "     ($out)"
check "--wait-ready on a member that does not answer: exit 1, UNAVAILABLE wait_ready" \
  test $rc -eq 1 -a -n "$(printf '%s' "$out" | grep 'UNAVAILABLE.*not ready after 1000 ms')"
kl cluster-status --wait-ready p9m9 >/dev/null 2>&1; rc=$?
check "--wait-ready on a node not in the cluster file: usage error (exit 2)" test $rc -eq 2

# The coordinator unit's ExecStartPre refuses a missing config before anything starts.
pre=$(sed -n 's/^ExecStartPre=//p' "$units/keyload-coordinator.service")
check "coordinator unit: ExecStartPre --check fails without its config" sh -c "! $pre >/dev/null 2>&1"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
