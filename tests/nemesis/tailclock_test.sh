#!/usr/bin/env bash
# A data partition's leader whose wall clock runs an hour ahead while its catalog tail fails,
# then is corrected: it must serve again (a valid catalog lease) within seconds of the
# correction. Two one-member partitions on loopback: p0m1 (the catalog) and p1m1, whose
# wall clock build/nemesis-clockshim.so offsets (NEMESIS_CLOCK_FILE; CLOCK_MONOTONIC,
# CLOCK_BOOTTIME and timed waits stay real). p0m1 is paused (SIGSTOP) so p1m1's held tail
# times out and its tail thread pauses before retrying; p1m1's clock is +3600 s meanwhile.
# Then the clock is set back and p0m1 resumed. A pause whose deadline was taken on the wall
# clock would then last the hour of the step: no tail renews the lease meanwhile and the
# partition answers UNAVAILABLE catalog_lease until restarted. Prints the time to serve
# again. Ports: four free ones in 18000-18499 picked from the pid; members are stopped by
# pid on every exit and the temporary directory removed.
#   bash tests/nemesis/tailclock_test.sh     (after make all build/nemesis-clockshim.so)
# KEYLOADD=PATH runs another keyloadd binary (to see the test fail on one without the fix).
set -u
cd "$(dirname "$0")/../.."
keyloadd=${KEYLOADD:-bin/keyloadd}
shim=$PWD/build/nemesis-clockshim.so
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tailclock-test-XXXXXX")
p0_pid= p1_pid=
cleanup() {
  for p in $p0_pid $p1_pid; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' TERM INT
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

[ -r "$shim" ] || { bad "build first: make build/nemesis-clockshim.so"; finish; }
[ -x "$keyloadd" ] && [ -x bin/keyload ] || { bad "build first: make all"; finish; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=
for i in $(seq 0 124); do
  p=$(( 18000 + (($$ + i) % 125) * 4 ))
  listening "$p" || listening $((p + 1)) || listening $((p + 2)) || listening $((p + 3)) || { port=$p; break; }
done
[ -n "$port" ] || { bad "no four free ports in 18000-18499"; finish; }
cfg="$tmp/cluster.json"
cat >"$cfg" <<JSON
{"cluster":"tailclock$$","replica_count":1,"insecure_local_admin":true,
 "timers":{"catalog_lease_ms":3000},
 "partitions":[{"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$port","peer":"tcp://127.0.0.1:$((port + 1))"}]},
               {"id":1,"members":[{"id":1,"client":"tcp://127.0.0.1:$((port + 2))","peer":"tcp://127.0.0.1:$((port + 3))"}]}]}
JSON
"$keyloadd" keygen --cluster-secret-out "$tmp/cluster.secret" >/dev/null || { bad "keygen"; finish; }
clock="$tmp/p1m1.clock"
echo +0 >"$clock"
first=
"$keyloadd" --help 2>&1 | grep -q -- "--init-store" && first=--init-store
"$keyloadd" --cluster "$cfg" --node p0m1 --data "$tmp/p0m1" --var "$tmp/var" --cluster-secret "$tmp/cluster.secret" $first >"$tmp/p0m1.log" 2>&1 &
p0_pid=$!
env LD_PRELOAD="$shim" NEMESIS_CLOCK_FILE="$clock" \
  "$keyloadd" --cluster "$cfg" --node p1m1 --data "$tmp/p1m1" --var "$tmp/var1" --cluster-secret "$tmp/cluster.secret" $first >"$tmp/p1m1.log" 2>&1 &
p1_pid=$!

# p1m1 serving with a valid catalog lease: a queue on partition 1 answers its stats (a
# data partition without a valid lease refuses with UNAVAILABLE catalog_lease).
kl() { timeout -k 2 20 bin/keyload --cluster "$cfg" "$@"; }
p1_serving() { kl --timeout 1500 queue stats jobs >/dev/null 2>&1; }
wait_serving() { # SECONDS: prints the ms it took, or fails
  local t0 end
  t0=$(ms); end=$(( t0 + $1 * 1000 ))
  while [ "$(ms)" -lt "$end" ]; do
    p1_serving && { echo $(( $(ms) - t0 )); return 0; }
    sleep 0.2
  done
  return 1
}

sleep 1; kl --timeout 10000 database create >/dev/null && kl --timeout 10000 queue create jobs --partition 1 >/dev/null ||
  { bad "cannot create the queue on partition 1"; tail -3 "$tmp/p1m1.log"; finish; }
if ! wait_serving 30 >/dev/null; then
  bad "p1m1 does not serve at start"
  kl --timeout 1500 queue stats jobs 2>&1 | head -3
  tail -5 "$tmp/p1m1.log"
  finish
fi
ok "p1m1 serves with a catalog lease (queue stats on partition 1 answer)"

# Pause the catalog, step p1m1 an hour ahead, let its held tail time out (2.5 s) and its
# retry pause start on the stepped clock, then correct the clock and resume the catalog.
kill -STOP "$p0_pid"
echo +3600 >"$clock"
sleep 4
echo +0 >"$clock"
sleep 0.2
kill -CONT "$p0_pid"
grep -q "catalog tail failed" "$tmp/p1m1.log" && ok "p1m1's tail failed while the catalog was paused" ||
  bad "p1m1's tail did not fail while the catalog was paused (the test exercised nothing)"
if took=$(wait_serving 20); then
  ok "p1m1 serves again ${took} ms after its clock was corrected and the catalog resumed"
else
  bad "p1m1 does not serve 20 s after its clock was corrected (a catalog tail pause taken on the wall clock?)"
  tail -3 "$tmp/p1m1.log"
fi
finish
