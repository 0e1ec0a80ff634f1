#!/usr/bin/env bash
# Backup and restore end to end (ARCHITECTURE.md "Backup and restore", README "Backup and
# restore"): an RF3 cluster of 3 partitions x 3 members takes enqueues, some received and
# acknowledged, then `keyload admin backup` runs while a writer keeps enqueueing; a damaged
# chunk and a truncated backup are refused by `admin restore --check` and by keyloadd before
# anything is installed; the original is stopped and `deploy/keyload-cluster restore` brings
# the backup up as a new cluster (new name, ports, member keys, store identities; the same
# cluster secret), where every message enqueued before the backup and not acknowledged is
# present exactly once and the acknowledged ones are gone. Ports 28000-29239 (below the
# ephemeral range); every process is stopped on exit by pid file, never by name.
set -u
cd "$(dirname "$0")/../.." || exit 1
t_start=$(date +%s)
name="bk$$" rname="bkr$$"
# original: base..base+17, restored: base+20..base+37, solo: base+19, +20, +419, +420; a
# window nobody listens in (other suites run beside this one on a shared machine)
base=""
for try in $(seq 0 19); do
  b=$(( 28000 + (($$ + try) % 20) * 40 ))   # below the ephemeral range (32768 on Linux)
  busy=$(ss -Htan 2>/dev/null | awk -v lo="$b" -v hi="$((b + 39))" '{n = split($4, a, ":"); p = a[n] + 0; if ((p >= lo && p <= hi) || (p >= lo + 400 && p <= hi + 400)) print p}' | head -1)
  [ -z "$busy" ] && { base=$b; break; }
done
[ -n "$base" ] || { echo "FAIL no free port window in 28000-29239"; exit 1; }
mkdir -p var
work=$(mktemp -d "$PWD/var/backuptest-XXXXXX")
cfg="$work/orig.json" rcfg="$work/restored.json"
var="var/$name" rvar="var/$rname"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
. tests/support/stop_dir.sh
. tests/support/flip_byte.sh
writer="" tool=""

cleanup() {
  [ -n "$writer" ] && kill -KILL "$writer" 2>/dev/null
  [ -n "$tool" ] && kill -KILL "$tool" 2>/dev/null
  stop_dir "$var"
  stop_dir "$rvar"
  rm -rf "$var" "$rvar" "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mkcfg() { # name port-base out
  jq --arg name "$1" --argjson base "$2" '
    .cluster = $name
    | del(.partitions[].members[].metrics)
    | .partitions |= (to_entries | map(.key as $pi | .value
        | .members |= (to_entries | map(.key as $mi | .value
            | .client = "tcp://127.0.0.1:\($base + $pi * 3 + $mi)"
            | .peer = "tcp://127.0.0.1:\($base + 9 + $pi * 3 + $mi)"))))' deploy/local-rf3.json >"$3"
}
mkcfg "$name" "$base" "$cfg"
mkcfg "$rname" $((base + 20)) "$rcfg"

finish() {
  echo "backup.sh: $passed passed, $failed failed in $(( $(date +%s) - t_start )) s"
  [ "$failed" -eq 0 ]
  exit $?
}

# ---- the original cluster: an administrator, a queue on partition 1, 30 messages, 10 acked
if ! out=$(timeout 60 deploy/keyload-cluster --config "$cfg" up 2>&1); then bad "original cluster up"; echo "$out" | tail -5; finish; fi
ok "original cluster up"
key="$work/root.key"
check "admin bootstrap" timeout 60 ./bin/keyload --cluster "$var/cluster.json" admin bootstrap --tenant bk \
  --database db --admin root --key-out "$key" --cluster-secret "$var/cluster.secret" >/dev/null
k() { timeout 30 ./bin/keyload --cluster "$var/cluster.json" --database bk/db --principal root --key "$key" "$@"; }
kr() { timeout 30 ./bin/keyload --cluster "$rvar/cluster.json" --database bk/db --principal root --key "$key" "$@"; }
check "queue create on partition 1" k queue create jobs --partition 1 >/dev/null
check "queue create on partition 2" k queue create load --partition 2 >/dev/null
sent=0
for i in $(seq 1 30); do k enqueue jobs "before-$i" >/dev/null && sent=$((sent + 1)); done
check "30 enqueues answered OK before the backup" [ "$sent" = 30 ]
acked=0
for _ in 1 2; do
  leases=$(k --json receive jobs --max 5 --lease-ms 60000 | jq -r '.results[0].messages[].lease_token')
  for l in $leases; do k ack jobs "$l" >/dev/null && acked=$((acked + 1)); done
done
check "10 messages received and acknowledged" [ "$acked" = 10 ]

# ---- the transfer hold: a backup tool killed -9 mid-cut leaves holds that end by themselves
for perm in QueuePublish QueueInspect QueueConsume QueueAck; do k principal grant root "$perm" --queue 'x*' >/dev/null; done
if k queue create xsrc --partition 1 >/dev/null && k queue create xdst --partition 2 >/dev/null; then
  ok "queues xsrc (partition 1) and xdst (partition 2)"; else bad "queues xsrc and xdst"; fi
guid() { cat /proc/sys/kernel/random/uuid; }
hid=$(guid)
if k transfer create --source xsrc --id "$hid" --dest xdst --token-out "$work/h.intent" held >/dev/null &&
   k transfer accept --dest xdst --intent @"$work/h.intent" >/dev/null &&
   k transfer receipt --dest xdst --source xsrc --id "$hid" --token-out "$work/h.receipt" >/dev/null; then
  ok "transfer 'held': created, accepted, receipt read"; else bad "transfer 'held' setup"; fi
for i in $(seq 1 5); do   # for the coordinator, started while the hold is in effect
  k transfer create --source xsrc --id "$(guid)" --dest xdst "early-$i" >/dev/null || bad "transfer create early-$i"
done
write_coord() { # var-dir
  (umask 077; jq -n --arg c "$1/cluster.json" --arg k "$key" \
    '{cluster_file: $c, database: "bk/db", transfer_coordinator_principal_id: "root",
      principal_key_file: $k, flush_interval_ms: 100, workers: 2}' >"$1/coordinator.json")
}
write_coord "$var"
KEYLOAD_FAILPOINTS='cli.backup.after_hold=sleep(60000)' ./bin/keyload --cluster "$var/cluster.json" \
  --principal root --key "$key" admin backup --out "$work/killed" --hold-ms 12000 >"$work/killed.out" 2>&1 &
tool=$!
held_at=$(date +%s%N)
sleep 1.5
kill -KILL "$tool" 2>/dev/null; wait "$tool" 2>/dev/null; tool=""
check "coordinator started on the original while the hold is in effect" \
  bash -c "timeout 60 deploy/keyload-cluster --config '$cfg' start coordinator >/dev/null"
# --timeout 2000: the SDK retries a retryable refusal until its deadline, which must come
# well before the hold's end to see the refusal.
out=$(k --timeout 2000 --json transfer complete --source xsrc --id "$hid" --receipt @"$work/h.receipt" 2>&1)
check "while held, Complete is refused UNAVAILABLE transfer_hold (retryable)" \
  [ "$(jq -r '"\(.error.code) \(.error.detail)"' <<<"$out" 2>/dev/null)" = "UNAVAILABLE transfer_hold" ]
[ "$(jq -r '"\(.error.code) \(.error.detail)"' <<<"$out" 2>/dev/null)" = "UNAVAILABLE transfer_hold" ] || echo "     complete: $out; tool: $(cat "$work/killed.out")"
check "the killed backup left only $work/killed.partial, no backup" [ -d "$work/killed.partial" -a ! -e "$work/killed" ]
left=$(( 14 - ($(date +%s%N) - held_at) / 1000000000 ))
[ "$left" -gt 0 ] && sleep "$left"
out=$(k --json transfer complete --source xsrc --id "$hid" --receipt @"$work/h.receipt" 2>&1)
check "after the hold's 12 s the killed tool's hold has ended by itself: Delivered" [ "$(jq -r '.results[0].state' <<<"$out" 2>/dev/null)" = Delivered ]
check "the coordinator retried its held Completes (log: detail transfer_hold)" \
  grep -q 'msg="retry".*detail="transfer_hold"' "$var/coordinator.log"
st=$(timeout 60 deploy/keyload-cluster --config "$cfg" status --json 2>/dev/null)
check "... and its status counts the retries ($(jq -r '.coordinator.status.counters.retries' <<<"$st" 2>/dev/null))" \
  [ "$(jq -r '.coordinator.status.counters.retries > 0' <<<"$st" 2>/dev/null)" = true ]
for _ in $(seq 1 40); do
  [ "$(k --json transfer pending --source xsrc 2>/dev/null | jq -r '.items | length' 2>/dev/null)" = 0 ] && break
  sleep 0.25
done
check "after the hold the coordinator delivered the 5 early transfers" \
  [ "$(k --json transfer pending --source xsrc 2>/dev/null | jq -r '.items | length' 2>/dev/null)" = 0 ]

# A cut slower than its hold: the tool sleeps 3 s after holding for 1 s, and a write lands
# on every partition meanwhile, so every pinned entry is past its partition's hold.
k queue create zero --partition 0 >/dev/null
KEYLOAD_FAILPOINTS='cli.backup.after_hold=sleep(3000)' timeout 60 ./bin/keyload --cluster "$var/cluster.json" \
  --principal root --key "$key" --json admin backup --out "$work/slow" --hold-ms 1000 >"$work/slow.out" 2>&1 &
slow=$!
sleep 1.6
for q in zero jobs load; do k enqueue "$q" "slow-cut" >/dev/null; done
wait "$slow"
out=$(cat "$work/slow.out")
check "a cut slower than its hold is refused UNAVAILABLE hold_expired (the member's pinned entry is past the hold), leaving no backup" \
  [ "$(jq -r '"\(.error.code) \(.error.detail)"' <<<"$out" 2>/dev/null)" = "UNAVAILABLE hold_expired" -a ! -e "$work/slow" ]
[ "$(jq -r '.error.detail' <<<"$out" 2>/dev/null)" = hold_expired ] || echo "     slow cut: $out"

# ---- transfers in flight: 10 more pending, the coordinator (principal root) running during the
# backup, but slowed before each Complete (3 s) so that they are still pending in the cut
timeout 60 deploy/keyload-cluster --config "$cfg" kill coordinator >/dev/null 2>&1
KEYLOAD_FAILPOINTS='coord.before_complete=sleep(3000)' timeout 60 deploy/keyload-cluster --config "$cfg" start coordinator >/dev/null ||
  bad "coordinator restarted with coord.before_complete=sleep(3000)"
ids=()
for i in $(seq 1 10); do
  id=$(guid); ids+=("$id")
  k transfer create --source xsrc --id "$id" --dest xdst "xfer-$i" >/dev/null || bad "transfer create $i"
done

# ---- the backup, while a writer keeps enqueueing on partition 2
( i=0; while :; do i=$((i + 1)); k enqueue load "during-$i" >/dev/null 2>&1; done ) &
writer=$!
t0=$(date +%s%N)
out=$(k --json admin backup --out "$work/bk" 2>&1)
rc=$?
backup_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
kill -KILL "$writer" 2>/dev/null; wait "$writer" 2>/dev/null; writer=""
check "admin backup under load (exit 0)" [ "$rc" = 0 ]
echo "     backup: $out (${backup_ms} ms wall, $(du -sb "$work/bk" 2>/dev/null | cut -f1) bytes on disk)"
check "manifest: 3 partitions, each with index, term, digest" \
  [ "$(jq '[.partitions[] | select(.index > 0 and .term > 0 and (.digest | length) == 64)] | length' "$work/bk/manifest.json" 2>/dev/null)" = 3 ]
check "manifest: partition 0 streamed last, database incarnation listed" \
  [ "$(jq -r '[.partitions[-1].id, (.databases[0].incarnation | length)] | @tsv' "$work/bk/manifest.json" 2>/dev/null)" = "0	32" ]
out=$(./bin/keyload --cluster "$var/cluster.json" --database bk/db --principal root --key "$key" --json transfer pending --source xsrc 2>&1)
echo "     transfers pending on the original right after the backup: $(jq -r '.items | length' <<<"$out" 2>/dev/null)"
check "manifest: every partition was pinned inside its hold (pin entry time < hold end)" \
  [ "$(jq '[.partitions[] | select(.pin_entry_unix_ms > 0 and .pin_entry_unix_ms < .hold_until_unix_ms)] | length' "$work/bk/manifest.json" 2>/dev/null)" = 3 ]
check "no .partial directory is left" [ ! -e "$work/bk.partial" ]
check "the backup closed its 3 streams (and the refused slow cut its 3): no pin left to idle out" \
  [ "$(cat "$var"/p*m*.log | grep -c 'msg="backup_close".*why=closed by the caller')" -ge 6 ]
check "a second backup to the same DIR is refused (exit 2)" bash -c "! ./bin/keyload --cluster $var/cluster.json --principal root --key $key admin backup --out $work/bk >/dev/null 2>&1"
out=$(timeout 30 ./bin/keyload --cluster "$var/cluster.json" --json admin backup --out "$work/nosession" 2>&1)
check "without a session a backup is refused (session_required)" [ "$(jq -r '.error.detail' <<<"$out" 2>/dev/null)" = session_required ]
[ "$(jq -r '.error.detail' <<<"$out" 2>/dev/null)" = session_required ] || echo "     no session: $out"

# ---- damaged and truncated backups: refused before anything is installed
cp -r "$work/bk" "$work/damaged"
f="$work/damaged/partition-1/chunk-000001"
flip_byte "$f" $(( $(stat -c %s "$f") / 2 ))
out=$(./bin/keyload --cluster "$rcfg" --json admin restore --in "$work/damaged" --check 2>&1)
check "a damaged chunk is refused by the check (backup_digest)" [ "$(jq -r '.error.detail' <<<"$out" 2>/dev/null)" = backup_digest ]
cp -r "$work/bk" "$work/truncated"
last=$(ls "$work/truncated/partition-1" | sort | tail -1)
rm "$work/truncated/partition-1/$last"
out=$(./bin/keyload --cluster "$rcfg" --json admin restore --in "$work/truncated" --check 2>&1)
check "a truncated backup is refused by the check (backup_truncated)" [ "$(jq -r '.error.detail' <<<"$out" 2>/dev/null)" = backup_truncated ]
mkdir -p "$work/shape"
jq '.partitions |= .[0:2]' "$rcfg" >"$work/shape/two.json"
out=$(./bin/keyload --cluster "$work/shape/two.json" --json admin restore --in "$work/bk" --check 2>&1)
check "a cluster of another shape is refused, naming shape.partition_count" \
  grep -q 'shape.partition_count' <<<"$(jq -r '.error.message' <<<"$out" 2>/dev/null)"
# keyloadd itself refuses the damaged and the truncated partition, leaving its store empty.
mkdir -p "$work/solo"
(cd "$work/solo" && "$OLDPWD/bin/keyloadd" keygen --cluster-secret-out cs >/dev/null && "$OLDPWD/bin/keyloadd" keygen --secret-out m.key >/dev/null)
jq --arg pub "$(./bin/keyloadd keygen --public-of "$work/solo/m.key")" --argjson port $((base + 19)) '
  .cluster = "solo" | .replica_count = 1 | .insecure_local_admin = true
  | .partitions = [{id: 0, members: [{id: 1, client: "tcp://127.0.0.1:\($port)", peer: "tcp://127.0.0.1:\($port + 400)", public_key: $pub}]},
                   {id: 1, members: [{id: 1, client: "tcp://127.0.0.1:\($port + 1)", peer: "tcp://127.0.0.1:\($port + 401)", public_key: $pub}]}]' \
  deploy/local-rf3.json >"$work/solo/c.json"
solo() { timeout 30 ./bin/keyloadd --cluster "$work/solo/c.json" --node p1m1 --data "$work/solo/$1" \
  --cluster-secret "$work/solo/cs" --member-key "$work/solo/m.key" --init-store --restore-from "$2" >"$work/solo/$1.log" 2>&1; }
solo d1 "$work/damaged/partition-1"
rc=$?
check "keyloadd --restore-from a damaged chunk exits 2 naming snapshot_digest" \
  bash -c "[ $rc = 2 ] && grep -q snapshot_digest '$work/solo/d1.log'"
solo d2 "$work/truncated/partition-1"
rc=$?
check "keyloadd --restore-from a truncated backup exits 2 naming restore_truncated" \
  bash -c "[ $rc = 2 ] && grep -q restore_truncated '$work/solo/d2.log'"
solo d3 "$work/bk/partition-2"
rc=$?
check "keyloadd --restore-from another partition's backup exits 2 (restore_partition)" \
  bash -c "[ $rc = 2 ] && grep -q restore_partition '$work/solo/d3.log'"

# ---- the original stops; the backup becomes a new cluster with the same cluster secret
timeout 60 deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1
mkdir -p "$rvar" && chmod 700 "$rvar"
cp "$var/cluster.secret" "$rvar/cluster.secret"
write_coord "$rvar"
t0=$(date +%s%N)
out=$(timeout 120 deploy/keyload-cluster --config "$rcfg" restore --in "$work/bk" 2>&1)
rc=$?
restore_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "deploy/keyload-cluster restore (exit 0)" [ "$rc" = 0 ]
[ "$rc" = 0 ] || echo "$out" | tail -25
echo "     restore: ${restore_ms} ms wall (check + 9 installs + starts)"
check "every restored member logged its install" [ "$(grep -l 'msg="restored"' "$rvar"/p*m*.log 2>/dev/null | wc -l)" = 9 ]
check "restored member keys differ from the originals" bash -c "! cmp -s '$var/p1m1.key' '$rvar/p1m1.key'"
# The restored store's incarnation (16 random bytes made by --init-store) is nowhere in the
# original member's store files, and the two members' stores are different directories.
new_id=$(grep -ho 'store_incarnation=[0-9a-f]*' "$rvar/p1m1.log" | head -1 | cut -d= -f2)
check "restored store identity ($new_id) is not in the original p1m1's store" python3 - "$new_id" "$var/p1m1" <<'PY'
import os, sys
needle = bytes.fromhex(sys.argv[1])
assert len(needle) == 16
for d, _, files in os.walk(sys.argv[2]):
    for f in files:
        with open(os.path.join(d, f), 'rb') as fh:
            if needle in fh.read():
                sys.exit(1)
PY

# every message enqueued before the backup and not acknowledged: present exactly once
got=""
for _ in $(seq 1 40); do
  page=$(kr --json receive jobs --max 50 --lease-ms 600000 2>/dev/null) || { sleep 0.5; continue; }
  bodies=$(jq -r '.results[0].messages[].body_utf8' <<<"$page" 2>/dev/null)
  [ -z "$bodies" ] && [ -n "$got" ] && break
  got="$got$bodies"$'\n'
done
n_unique=$(grep -c '^before-' <<<"$(sort -u <<<"$got")")
n_all=$(grep -c '^before-' <<<"$got")
check "restored: the 20 unacknowledged messages, each exactly once ($n_all received, $n_unique distinct)" \
  [ "$n_all" = 20 -a "$n_unique" = 20 ]
# every transfer: delivered exactly once, those pending at the backup by the restored
# cluster's coordinator
for _ in $(seq 1 60); do
  [ "$(kr --json transfer pending --source xsrc 2>/dev/null | jq -r '.items | length' 2>/dev/null)" = 0 ] && break
  sleep 0.5
done
check "restored: no transfer left pending on xsrc" [ "$(kr --json transfer pending --source xsrc 2>/dev/null | jq -r '.items | length' 2>/dev/null)" = 0 ]
got=""
for _ in $(seq 1 20); do
  page=$(kr --json receive xdst --max 50 --lease-ms 600000 2>/dev/null) || { sleep 0.5; continue; }
  bodies=$(jq -r '.results[0].messages[].body_utf8' <<<"$page" 2>/dev/null)
  [ -z "$bodies" ] && break
  got="$got$bodies"$'\n'
done
exp=$(printf 'held\n'; seq 1 5 | sed 's/^/early-/'; seq 1 10 | sed 's/^/xfer-/')
check "restored: xdst holds each of the 16 transferred messages exactly once" \
  [ "$(grep -v '^$' <<<"$got" | sort)" = "$(sort <<<"$exp")" ]
[ "$(grep -v '^$' <<<"$got" | sort)" = "$(sort <<<"$exp")" ] || echo "     xdst: $(grep -v '^$' <<<"$got" | sort | tr '\n' ' ')"
delivered=$(grep -c 'msg="delivered"' "$rvar/coordinator.log" 2>/dev/null)
echo "     transfers delivered by the original's coordinator before it stopped: $(grep -c 'msg="delivered"' "$var/coordinator.log" 2>/dev/null), by the restored one's: $delivered"
check "transfers pending in the cut were delivered by the restored cluster's coordinator ($delivered)" [ "${delivered:-0}" -gt 0 ]
out=$(kr --json enqueue jobs after-restore 2>&1)
mid=$(jq -r '.results[0].message_id // 0' <<<"$out" 2>/dev/null)
check "restored cluster takes new writes, numbered after the restored messages (id $mid > 30)" [ "${mid:-0}" -gt 30 ]
finish
