#!/usr/bin/env bash
# The C SDK examples suite (KL-7 item 1): runs each program of client/examples (built by
# `make` into bin/examples) against a real RF3 cluster and checks its exit code and key
# output, then runs them once more built with ASan+LSan+UBSan to show they free everything.
# The cluster: deploy/local-rf3.json's layout (3 partitions x 3 members) under its own name
# on 18 free loopback ports in 17000-17899, started by deploy/keyload-cluster from a cluster
# file under var/, stopped by pid (the launcher's `down`, then SIGKILL of any pid file left)
# on exit, failure or signal; never by name. Prints "ok X" / "FAIL X" and one closing
# "N passed, N failed" line (tests/support/test-all.sh sums it).
set -u
cd "$(dirname "$0")/../.."
root=$PWD
name="extest$$"
mkdir -p var
cfg="$root/var/examples-$$.json"
keys=$(mktemp -d "$root/var/examples-keys-XXXXXX")
chmod 700 "$keys"
out_dir=$(mktemp -d "$root/var/examples-out-XXXXXX")
san_dir="$root/build/examples-san"
passed=0 failed=0

cleanup() {
  [ -f "$cfg" ] && timeout -k 5 60 deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1
  local f p
  for f in "var/$name"/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
  done
  rm -rf "var/$name" "$cfg" "$keys" "$out_dir"
}
trap cleanup EXIT
trap 'echo "FAIL interrupted"; exit 1' INT TERM
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ] && exit 0; exit 1; }

for e in enqueue_receive_ack transfer errors; do
  [ -x "bin/examples/$e" ] || { bad "bin/examples/$e is built (run make)"; finish; }
done

# 18 consecutive free ports (9 client, 9 peer), a block chosen from the pid, below the
# ephemeral range (32768+): an outgoing connection there could hold a member's port.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
base=
for i in $(seq 0 49); do
  b=$(( 17000 + (($$ + i) % 50) * 18 ))
  free=1
  for p in $(seq "$b" $((b + 17))); do listening "$p" && { free=0; break; }; done
  [ $free -eq 1 ] && { base=$b; break; }
done
[ -n "$base" ] || { bad "no block of 18 free ports in 17000-17899"; finish; }

jq --arg name "$name" --argjson base "$base" '
  .cluster = $name |
  .partitions |= [ to_entries[] | .key as $pi | .value |
    .members |= [ to_entries[] | .key as $mi | .value |
      .client = "tcp://127.0.0.1:\($base + $pi * 3 + $mi)" |
      .peer = "tcp://127.0.0.1:\($base + 9 + $pi * 3 + $mi)" ] ]' deploy/local-rf3.json >"$cfg"
echo "--- RF3 cluster $name on ports $base-$((base + 17))"
if ! timeout -k 5 120 deploy/keyload-cluster --config "$cfg" up >"$out_dir/up.log" 2>&1; then
  bad "cluster up: $(tail -n 5 "$out_dir/up.log")"; finish
fi
# Every partition with a leader and every member answering (at most 30 s).
ready=0
for i in $(seq 1 120); do
  st=$(timeout -k 5 30 deploy/keyload-cluster --config "$cfg" status --json 2>/dev/null)
  if jq -e '(.partitions | length) == 3 and all(.partitions[]; .leader != null and all(.members[]; .up))' \
       <<<"$st" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.25
done
[ $ready -eq 1 ] && ok "cluster up, a leader in every partition" || { bad "no leader in every partition within 30 s"; finish; }

keyed="var/$name/cluster.json"
kl() { timeout -k 5 60 ./bin/keyload --cluster "$keyed" "$@"; }
if ! kl admin bootstrap --tenant ex --database shop --admin root --key-out "$keys/root.key" >"$out_dir/boot.log" 2>&1; then
  bad "admin bootstrap: $(cat "$out_dir/boot.log")"; finish
fi
export KEYLOAD_CLUSTER="$keyed" KEYLOAD_DATABASE=ex/shop KEYLOAD_PRINCIPAL=root KEYLOAD_KEY="$keys/root.key"
# The examples' queues are "ex-*"; the daemon checks an administrator's data grants too.
granted=1
for p in QueuePublish QueueConsume QueueInspect; do
  kl principal grant root "$p" --queue 'ex-*' --fields '*' --headers '*' >/dev/null 2>"$out_dir/grant.log" || granted=0
done
kl principal grant root QueueAck --queue 'ex-*' >/dev/null 2>>"$out_dir/grant.log" || granted=0
[ $granted -eq 1 ] && ok "bootstrap ex/shop, grants for root on ex-*" || { bad "grants: $(cat "$out_dir/grant.log")"; finish; }

# run NAME BINARY [ENV...]: runs the example (bounded), stdout in $out_dir/NAME.out.
run() {
  local n=$1 exe=$2; shift 2
  timeout -k 5 90 env "$@" "$exe" >"$out_dir/$n.out" 2>"$out_dir/$n.err"
}
# The JSON after "LABEL " on the first line starting with it.
json_of() { sed -n "s/^$1 //p" "$out_dir/$2.out" | head -n 1; }

check_enqueue_receive_ack() { # NAME
  local n=$1 j
  j=$(json_of enqueued "$n")
  [ "$(jq -r '.results[0].kind' <<<"$j" 2>/dev/null)" = enqueued ] && ok "$n: enqueued receipt" || bad "$n: enqueued: $j"
  j=$(json_of received "$n")
  jq -e '.results[0].kind == "received" and (.results[0].messages | length) == 1 and
         .results[0].messages[0].body_utf8 == "order 17" and .results[0].messages[0].headers.source == "web" and
         .results[0].messages[0].fields.total == {"type":"double","value":9.5} and
         .results[0].messages[0].fields.qty.value == 2' <<<"$j" >/dev/null 2>&1 &&
    ok "$n: received the body, header and typed fields" || bad "$n: received: $j"
  j=$(json_of acked "$n")
  [ "$(jq -r '.results[0].count' <<<"$j" 2>/dev/null)" = 1 ] && ok "$n: acked 1" || bad "$n: acked: $j"
  j=$(json_of stats "$n")
  [ "$(jq -r '.messages' <<<"$j" 2>/dev/null)" = 0 ] && ok "$n: stats say 0 messages" || bad "$n: stats: $j"
  j=$(json_of deleted "$n")
  [ "$(jq -r '.results[0].kind' <<<"$j" 2>/dev/null)" = queue_deleted ] && ok "$n: queue deleted" || bad "$n: deleted: $j"
}
check_transfer() {
  local n=$1 j a b
  j=$(json_of transfer_created "$n")
  jq -e '.results[0].kind == "transfer_created" and .results[0].state == "OutputPending" and
         (.results[0].intent_token | length) > 0' <<<"$j" >/dev/null 2>&1 &&
    ok "$n: created, OutputPending with an intent token" || bad "$n: created: $j"
  j=$(json_of transfer_accepted "$n")
  jq -e '.results[0].kind == "transfer_accepted" and .results[0].partition == 2 and .results[0].deduplicated == false' \
    <<<"$j" >/dev/null 2>&1 && ok "$n: accepted on partition 2" || bad "$n: accepted: $j"
  j=$(json_of transfer_receipt "$n")
  jq -e '.target_commit.partition == 2 and (has("receipt_token") | not)' <<<"$j" >/dev/null 2>&1 &&
    ok "$n: receipt read (printed without its token)" || bad "$n: receipt: $j"
  j=$(json_of transfer_completed "$n")
  [ "$(jq -r '.results[0].state' <<<"$j" 2>/dev/null)" = Delivered ] && ok "$n: completed: Delivered" || bad "$n: completed: $j"
  grep -qx "state Delivered" "$out_dir/$n.out" && [ "$(jq -r .state <<<"$(json_of transfer_inspect "$n")")" = Delivered ] &&
    ok "$n: inspect says Delivered" || bad "$n: inspect: $(json_of transfer_inspect "$n")"
  a=$(json_of transfer_created "$n"); b=$(json_of transfer_created_replay "$n")
  [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "^replay identical (" "$out_dir/$n.out" &&
    ok "$n: replayed create: byte-identical receipt and JSON" || bad "$n: replay: $a / $b"
}
check_errors() {
  local n=$1 c want
  for c in INVALID_ARGUMENT:command_id NOT_FOUND: PERMISSION_DENIED:grant:QueuePublish CONFLICT:; do
    want=${c%%:*}
    j=$(json_of "expected $want" "$n")
    jq -e --arg code "$want" --arg detail "${c#*:}" '.error.code == $code and (.error.message | length) > 0 and
        ($detail == "" or .error.detail == $detail)' <<<"$j" >/dev/null 2>&1 &&
      ok "$n: $want with message and detail" || bad "$n: $want: $j"
  done
  grep -q "^resent .*: identical receipt" "$out_dir/$n.out" && ok "$n: resent batch, identical receipt" ||
    bad "$n: resend: $(cat "$out_dir/$n.out")"
}

echo "--- examples"
for e in enqueue_receive_ack transfer errors; do
  start=$(date +%s%N)
  run "$e" "bin/examples/$e"; rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if [ $rc -eq 0 ]; then ok "$e exits 0 (${ms} ms)"; else bad "$e exit $rc: $(tail -n 5 "$out_dir/$e.err")"; fi
  "check_$e" "$e"
done

# Once more under AddressSanitizer (with LeakSanitizer) and UBSan: every example built from
# its source against the same lib/libkeyload.a (malloc is intercepted, so the SDK's own
# allocations are tracked too). A leak or an error makes the program exit non-zero.
echo "--- examples under ASan+LSan+UBSan"
mkdir -p "$san_dir"
for e in enqueue_receive_ack transfer errors; do
  if ! cc -std=c11 -Wall -Wextra -Werror -g -O1 -I. -Ibuild/gen \
       -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
       -o "$san_dir/$e" "client/examples/$e.c" lib/libkeyload.a \
       -lnng -luv -lsodium -lprotobuf-c -ljansson -lpthread 2>"$out_dir/san-$e.cc"; then
    bad "$e builds with -fsanitize=address,undefined: $(head -n 5 "$out_dir/san-$e.cc")"; continue
  fi
  run "san-$e" "$san_dir/$e" ASAN_OPTIONS=detect_leaks=1:exitcode=23 UBSAN_OPTIONS=print_stacktrace=1; rc=$?
  if [ $rc -eq 0 ] && ! grep -q "Sanitizer" "$out_dir/san-$e.err"; then
    ok "$e under ASan+LSan+UBSan: no leak, no error"
  else
    bad "$e under sanitizers (exit $rc): $(grep -m 3 -A 8 "Sanitizer" "$out_dir/san-$e.err" | head -n 20)"
  fi
done
finish
