#!/usr/bin/env bash
# CLI end to end against real keyloadd processes: the §10 contract (exit codes, --json
# shapes, replay with --command-id, tokens from stdin) and the catalog on partition 0
# (`database create`, queue placement, the two-step queue delete).
# Part 1: a one-member, one-partition cluster started by deploy/keyload-cluster (which
# stops its member on exit). Part 2: three single-member partitions (replica_count 1)
# started here by hand and stopped by pid on exit. Ports: 27000-29999 (below the
# ephemeral range, 32768+), six consecutive ones per run picked from the pid.
set -u
cd "$(dirname "$0")/../.."
name="clitest$$"
base=$(( 27000 + ($$ % 499) * 6 ))   # base .. base+6 <= 29994
port=$base
mkdir -p var
cfg=$(mktemp "$PWD/var/cli-XXXXXX.json")
cat >"$cfg" <<JSON
{"cluster":"$name","replica_count":1,"limits":{"MaxBatchBytes":65536,"MaxFrameBytes":131072},
 "partitions":[{"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$port"}]}]}
JSON
dir3=$(mktemp -d "$PWD/var/cli3-XXXXXX")
pids3=()
stop3() { # SIGTERM our own members by pid, SIGKILL whatever still runs after 5 s
  local p i
  for p in "${pids3[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for i in $(seq 1 50); do
    for p in "${pids3[@]}"; do kill -0 "$p" 2>/dev/null && break; p=; done
    [ -z "${p:-}" ] && break
    sleep 0.1
  done
  for p in "${pids3[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pids3=()
}
cleanup() {
  deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1
  stop3
  rm -rf "var/$name" "$cfg" "$dir3" "/tmp/cli-err.$$" ${keys:+"$keys"}
}
trap cleanup EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
expect() { # expect NAME WANT_EXIT CMD... ; keeps stdout in $out
  local n=$1 want=$2; shift 2
  out=$("$@" 2>/tmp/cli-err.$$); local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$n"; else bad "$n (exit $rc, want $want): $(cat /tmp/cli-err.$$)"; fi
}
# Every CLI call is bounded: it has its own timeouts, this is the backstop.
kl() { timeout -k 5 60 ./bin/keyload --cluster "$cfg" "$@"; }
guid() { cat /proc/sys/kernel/random/uuid; }

echo "--- one partition (deploy/keyload-cluster, port $port)"
deploy/keyload-cluster --config "$cfg" up >/dev/null || { echo "FAIL cluster up"; echo "0 passed, 1 failed"; exit 1; }

# The catalog: nothing can be created before its database exists.
expect "queue create before its database is NOT_FOUND (exit 1)" 1 kl --json queue create jobs --partition 0
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && grep -q "default/default" <<<"$(jq -r '.error.message' <<<"$out")" &&
  ok "missing database: NOT_FOUND naming default/default" || bad "missing database: $out"
# The first administrator: only with the cluster secret (the launcher's file by default),
# only once; the new key file is 0600 and is removed when the bootstrap is refused.
keys="$(mktemp -d)"
head -c 32 /dev/urandom >"$keys/wrong.secret" && chmod 600 "$keys/wrong.secret"
expect "bootstrap with another secret is UNAUTHENTICATED (exit 1)" 1 kl --json admin bootstrap --tenant boot \
  --database first --admin root --key-out "$keys/bad.key" --cluster-secret "$keys/wrong.secret"
[ "$(jq -r '.error.detail' <<<"$out")" = bootstrap_proof ] && [ ! -e "$keys/bad.key" ] &&
  ok "wrong proof: detail bootstrap_proof, key file removed" || bad "wrong proof: $out"
expect "admin bootstrap" 0 kl admin bootstrap --tenant boot --database first --admin root --key-out "$keys/root.key"
grep -q "^bootstrapped boot/first: cluster administrator root (policy epoch 1)" <<<"$out" &&
  [ "$(stat -c %a "$keys/root.key")" = 600 ] && [ "$(stat -c %s "$keys/root.key")" = 64 ] &&
  ok "bootstrap receipt; key file 64 bytes, mode 600" || bad "bootstrap: $out $(ls -l "$keys")"
expect "second bootstrap is FAILED_PRECONDITION (exit 1)" 1 kl --json admin bootstrap --tenant boot \
  --database second --admin root2 --key-out "$keys/root2.key"
[ "$(jq -r '.error.detail' <<<"$out")" = bootstrap_done ] && [ ! -e "$keys/root2.key" ] &&
  ok "second bootstrap: detail bootstrap_done, key file removed" || bad "second bootstrap: $out"
# Sessions (DESIGN.md §5): as the bootstrapped administrator every command goes sealed,
# verified with the member keys of the launcher's var/<name>/cluster.json.
keyed="var/$name/cluster.json"
ks() { timeout -k 5 60 ./bin/keyload --cluster "$keyed" --database boot/sess "$@"; }
root=(--principal root --key "$keys/root.key")
[ "$(jq -r '.partitions[0].members[0].public_key | length' "$keyed")" = 44 ] &&
  ok "the launcher's cluster.json carries the member's public key" || bad "no public key in $keyed"
expect "sealed: database create" 0 ks "${root[@]}" --json database create boot/sess
[ "$(jq -r '.results[0].kind' <<<"$out")" = database_created ] && ok "sealed: database_created" || bad "sealed db: $out"
expect "sealed: queue create" 0 ks "${root[@]}" --json queue create sq --partition 0
[ "$(jq -r '.results[0].kind' <<<"$out")" = queue_created ] && ok "sealed: queue_created" || bad "sealed queue: $out"
scmd=$(guid)
expect "sealed: enqueue" 0 ks "${root[@]}" --json enqueue --command-id "$scmd" sq "sealed body"
sfirst=$out
expect "sealed: enqueue replay (options after the command)" 0 ks --json enqueue --command-id "$scmd" sq "sealed body" "${root[@]}"
[ -n "$sfirst" ] && [ "$sfirst" = "$out" ] && ok "sealed: replayed receipt identical" || bad "sealed replay: $out / $sfirst"
expect "sealed: receive" 0 ks "${root[@]}" --json receive sq --max 1 --lease-ms 60000
slease=$(jq -r '.results[0].messages[0].lease_token' <<<"$out" 2>/dev/null)
[ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = "sealed body" ] && ok "sealed: received the body" ||
  bad "sealed receive: $out"
expect "sealed: ack" 0 ks "${root[@]}" --json ack sq "$slease"
[ "$(jq -r '.results[0].count' <<<"$out")" = 1 ] && ok "sealed: acked 1" || bad "sealed ack: $out"
expect "sealed: queue stats" 0 ks "${root[@]}" --json queue stats sq
[ "$(jq -r '.messages' <<<"$out")" = 0 ] && ok "sealed: stats say 0 messages" || bad "sealed stats: $out"
expect "sealed via KEYLOAD_PRINCIPAL/KEYLOAD_KEY" 0 env KEYLOAD_PRINCIPAL=root KEYLOAD_KEY="$keys/root.key" \
  timeout -k 5 60 ./bin/keyload --cluster "$keyed" --database boot/sess --json queue stats sq
./bin/keyloadd keygen --secret-out "$keys/other.key" >/dev/null
expect "sealed: another key is UNAUTHENTICATED (exit 1)" 1 ks --principal root --key "$keys/other.key" --json queue stats sq
[ "$(jq -r '.error.code' <<<"$out")" = UNAUTHENTICATED ] && [ "$(jq -r '.error.detail' <<<"$out")" = bad_signature ] &&
  ok "wrong key: UNAUTHENTICATED bad_signature" || bad "wrong key: $out"
expect "sealed: an unknown principal is UNAUTHENTICATED (exit 1)" 1 ks --principal ghost --key "$keys/root.key" --json queue stats sq
[ "$(jq -r '.error.code' <<<"$out")" = UNAUTHENTICATED ] && ok "unknown principal: UNAUTHENTICATED" || bad "ghost: $out"
expect "--principal without --key is a usage error (exit 2)" 2 ks --principal root queue stats sq
expect "--key without --principal is a usage error (exit 2)" 2 env KEYLOAD_KEY="$keys/root.key" \
  timeout -k 5 60 ./bin/keyload --cluster "$keyed" queue stats sq
expect "a cluster file without public keys is refused (exit 1)" 1 kl "${root[@]}" --json queue stats sq
[ "$(jq -r '.error.detail' <<<"$out")" = public_key ] && grep -q p0m1 <<<"$(jq -r '.error.message' <<<"$out")" &&
  ok "no public_key: detail public_key, names p0m1" || bad "unkeyed file: $out"
chmod 644 "$keys/root.key"
expect "a key file readable by others is refused (exit 1)" 1 ks "${root[@]}" --json queue stats sq
chmod 600 "$keys/root.key"
deploy/keyload-cluster --config "$cfg" kill p0m1 >/dev/null
deploy/keyload-cluster --config "$cfg" start p0m1 >/dev/null
expect "sealed: enqueue after kill -9 and restart (a new Hello)" 0 ks "${root[@]}" --json enqueue sq "after restart"
expect "sealed: stats after restart" 0 ks "${root[@]}" --json queue stats sq
[ "$(jq -r '.messages' <<<"$out")" = 1 ] && ok "sealed: 1 message after restart" || bad "sealed after restart: $out"
rm -rf "$keys"
dbcmd=$(guid)
expect "database create" 0 kl database create --command-id "$dbcmd"
grep -Eq "^created database default/default, database id [0-9]+, catalog version [0-9]+ .*$dbcmd" <<<"$out" &&
  ok "database create prints its receipt" || bad "database receipt: $out"
first=$out
expect "database create replay" 0 kl database create --command-id "$dbcmd"
[ "$first" = "$out" ] && ok "replayed database receipt identical" || bad "database replay: $out / $first"
expect "database create again is CONFLICT (exit 1)" 1 kl --json database create default/default
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "database conflict JSON" || bad "database conflict JSON: $out"
expect "database create --json" 0 kl --json database create acme/shop
[ "$(jq -s 'length' <<<"$out")" = 1 ] && [ "$(jq -r '.results | length' <<<"$out")" = 1 ] &&
  [ "$(jq -r '.results[0].kind' <<<"$out")" = database_created ] &&
  [ "$(jq -r '.results[0].database_id > 0 and .catalog_version > 0' <<<"$out")" = true ] &&
  ok "database create --json: one object, results[0].kind database_created" || bad "database JSON: $out"
expect "queue create in a missing database is NOT_FOUND (exit 1)" 1 kl --database acme/nope --json queue create jobs
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && grep -q "acme/nope" <<<"$(jq -r '.error.message' <<<"$out")" &&
  ok "NOT_FOUND names the database acme/nope" || bad "missing database: $out"
expect "database name without TENANT/ is refused (exit 1)" 1 kl --json database create 'no-slash'
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && ok "bad database name: INVALID_ARGUMENT" || bad "bad name: $out"
expect "database create with a limit above the cluster's is INVALID_ARGUMENT" 1 \
  kl --json database create acme/big --max-batch-bytes 999999999
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && ok "limit refusal code" || bad "limit refusal: $out"

expect "queue create" 0 kl --json queue create jobs --partition 0 --max-messages 3
[ "$(jq -r '.results[0].kind' <<<"$out")" = queue_created ] && ok "create receipt kind" || bad "create receipt: $out"
[ "$(jq -r '.results[0].partition' <<<"$out")" = 0 ] && ok "pinned to partition 0" || bad "create partition: $out"
expect "queue create again is CONFLICT (exit 1)" 1 kl --json queue create jobs --partition 0
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "conflict JSON" || bad "conflict JSON: $out"
expect "queue create without --partition (one partition: 0)" 0 kl queue create picked
grep -q "^created queue picked on partition 0 (picked" <<<"$out" && ok "picked partition printed" || bad "picked: $out"
expect "queue create --partition 1 on a one-partition cluster is refused" 1 kl --json queue create p1 --partition 1
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && ok "no partition 1: INVALID_ARGUMENT" || bad "partition 1: $out"
expect "same queue name in another database" 0 kl --database acme/shop --json queue create jobs --max-messages 1
expect "enqueue into acme/shop's jobs" 0 kl --database acme/shop enqueue jobs "elsewhere"
cmd=$(guid)
expect "enqueue" 0 kl --json enqueue --command-id "$cmd" jobs --header h=1 --field n:int=7 "body one"
first=$out
expect "enqueue replay" 0 kl --json enqueue --command-id "$cmd" jobs --header h=1 --field n:int=7 "body one"
[ -n "$first" ] && [ "$first" = "$out" ] && ok "replayed receipt identical" || bad "replay differs"
expect "same id, other body is CONFLICT" 1 kl --json enqueue --command-id "$cmd" jobs "other"
[ "$(jq -r .error.code <<<"$out")" = CONFLICT ] && ok "conflict on reuse" || bad "reuse: $out"
grep -q "other" <<<"$out" && bad "error echoes the body" || ok "error does not echo the body"
expect "enqueue 2" 0 kl enqueue jobs two
expect "enqueue 3" 0 kl enqueue jobs three
expect "quota refusal (exit 1)" 1 kl --json enqueue jobs four
[ "$(jq -r '.error.code' <<<"$out")" = RESOURCE_EXHAUSTED ] && ok "quota code" || bad "quota JSON: $out"
expect "stats" 0 kl --json queue stats jobs
[ "$(jq -r '.messages' <<<"$out")" = 3 ] && ok "3 messages" || bad "stats: $out"
expect "stats in acme/shop" 0 kl --database acme/shop --json queue stats jobs
[ "$(jq -r '.messages' <<<"$out")" = 1 ] && ok "databases keep their queues apart" || bad "acme stats: $out"
expect "receive" 0 kl --json receive jobs --max 2 --lease-ms 60000
mapfile -t leases < <(jq -r '.results[0].messages[].lease_token' <<<"$out" 2>/dev/null)
[ "${#leases[@]}" = 2 ] && ok "2 leases" || bad "receive: $out"
[ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = "body one" ] && ok "first body in order" || bad "order: $out"
expect "release from stdin" 0 bash -c "printf '%s\n' '${leases[1]:-}' | timeout 60 ./bin/keyload --cluster '$cfg' release jobs -"
expect "ack" 0 kl ack jobs "${leases[0]:-}"
expect "ack twice is FAILED_PRECONDITION" 1 kl --json ack jobs "${leases[0]:-}"
[ "$(jq -r '.error.code' <<<"$out")" = FAILED_PRECONDITION ] && ok "stale lease code" || bad "stale lease: $out"
expect "delete non-empty refused" 1 kl --json queue delete jobs
[ "$(jq -r '.error.code' <<<"$out")" = FAILED_PRECONDITION ] && ok "non-empty delete code" || bad "delete: $out"
expect "delete an empty queue" 0 kl --json queue delete picked
[ "$(jq -r '.results[0].kind' <<<"$out")" = queue_deleted ] && ok "delete receipt kind" || bad "delete: $out"
expect "deleted queue stats is NOT_FOUND" 1 kl --json queue stats picked
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "deleted: NOT_FOUND" || bad "deleted stats: $out"
expect "re-create a deleted queue" 0 kl --json queue create picked
expect "all-zero GUID is refused" 1 kl --json enqueue --command-id 00000000-0000-0000-0000-000000000000 jobs x
expect "unknown command exits 2" 2 kl frobnicate
expect "database without subcommand exits 2" 2 kl database
expect "missing queue is NOT_FOUND" 1 kl --json queue stats nope
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "not found code" || bad "not found: $out"
deploy/keyload-cluster --config "$cfg" kill p0m1 >/dev/null
expect "down member is UNAVAILABLE (exit 1)" 1 kl --timeout 1000 queue stats jobs
deploy/keyload-cluster --config "$cfg" start p0m1 >/dev/null
expect "after restart" 0 kl --json queue stats jobs
[ "$(jq -r '.messages' <<<"$out")" = 2 ] && ok "2 messages after kill -9 and restart" || bad "after restart: $out"
expect "database still there after restart (CONFLICT)" 1 kl --json database create
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "catalog survives kill -9" || bad "after restart: $out"
expect "database create replay after restart" 0 kl database create --command-id "$dbcmd"
deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1

# ---- three partitions: placement chosen by partition 0, the two-step delete ----
echo "--- three partitions (ports $((base + 1))-$((base + 6)))"
cfg3="$dir3/cluster.json"
cat >"$cfg3" <<JSON
{"cluster":"${name}p3","replica_count":1,"limits":{"MaxBatchBytes":65536,"MaxFrameBytes":131072},
 "partitions":[
  {"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 1))","peer":"tcp://127.0.0.1:$((base + 4))"}]},
  {"id":1,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 2))","peer":"tcp://127.0.0.1:$((base + 5))"}]},
  {"id":2,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 3))","peer":"tcp://127.0.0.1:$((base + 6))"}]}]}
JSON
up3=1
./bin/keyloadd keygen --cluster-secret-out "$dir3/cluster.secret" >/dev/null
for p in 0 1 2; do
  ./bin/keyloadd --cluster "$cfg3" --node "p${p}m1" --var "$dir3" --cluster-secret "$dir3/cluster.secret" \
    >"$dir3/p${p}m1.log" 2>&1 &
  pids3+=($!)
done
for p in 0 1 2; do
  for _ in $(seq 1 200); do grep -q 'msg="ready"' "$dir3/p${p}m1.log" && break; sleep 0.05; done
  grep -q 'msg="ready"' "$dir3/p${p}m1.log" || { up3=0; bad "p${p}m1 not ready: $(tail -n 3 "$dir3/p${p}m1.log")"; }
done
if [ "$up3" = 1 ]; then
  k3() { timeout -k 5 60 ./bin/keyload --cluster "$cfg3" "$@"; }
  expect "3p: queue create before the database is NOT_FOUND" 1 k3 --json queue create q
  [ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "3p: NOT_FOUND" || bad "3p missing database: $out"
  expect "3p: database create" 0 k3 --json database create
  [ "$(jq -r '.results[0].kind' <<<"$out")" = database_created ] && ok "3p: database_created" || bad "3p db: $out"
  expect "3p: database create again is CONFLICT" 1 k3 --json database create
  [ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "3p: database conflict" || bad "3p db conflict: $out"
  expect "3p: queue create q (no --partition)" 0 k3 --json queue create q --max-messages 10
  pq=$(jq -r '.results[0].partition' <<<"$out")
  { [ "$pq" = 1 ] || [ "$pq" = 2 ]; } && ok "3p: q placed on data partition $pq" || bad "3p placement: $out"
  expect "3p: queue create q text" 0 k3 queue create q-text
  grep -Eq "^created queue q-text on partition [12] \(picked" <<<"$out" && ok "3p: picked partition printed" ||
    bad "3p picked: $out"
  expect "3p: queue create --partition 2 q2" 0 k3 --json queue create --partition 2 q2
  [ "$(jq -r '.results[0].partition' <<<"$out")" = 2 ] && ok "3p: q2 on partition 2" || bad "3p q2: $out"
  expect "3p: queue create --partition 3 is INVALID_ARGUMENT" 1 k3 --json queue create --partition 3 q9
  [ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && ok "3p: no partition 3" || bad "3p partition 3: $out"
  expect "3p: enqueue q" 0 k3 --json enqueue q --header h=1 "first"
  [ "$(jq -r '.partition' <<<"$out")" = "$pq" ] && ok "3p: enqueue committed on partition $pq" || bad "3p enqueue: $out"
  expect "3p: enqueue q again" 0 k3 enqueue q "second"
  expect "3p: enqueue q2" 0 k3 --json enqueue q2 "for two"
  [ "$(jq -r '.partition' <<<"$out")" = 2 ] && ok "3p: q2's enqueue on partition 2" || bad "3p enqueue q2: $out"
  expect "3p: stats q" 0 k3 --json queue stats q
  [ "$(jq -r '.messages' <<<"$out")" = 2 ] && [ "$(jq -r '.partition' <<<"$out")" = "$pq" ] &&
    ok "3p: q holds 2 messages on partition $pq" || bad "3p stats: $out"
  expect "3p: receive q" 0 k3 --json receive q --max 5 --lease-ms 60000
  mapfile -t l3 < <(jq -r '.results[0].messages[].lease_token' <<<"$out" 2>/dev/null)
  [ "${#l3[@]}" = 2 ] && [ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = first ] &&
    ok "3p: 2 leases, in order" || bad "3p receive: $out"
  expect "3p: delete non-empty q is FAILED_PRECONDITION" 1 k3 --json queue delete q
  [ "$(jq -r '.error.code' <<<"$out")" = FAILED_PRECONDITION ] && ok "3p: non-empty delete refused" ||
    bad "3p delete non-empty: $out"
  expect "3p: ack q" 0 k3 --json ack q "${l3[@]}"
  [ "$(jq -r '.results[0].count' <<<"$out")" = 2 ] && ok "3p: acked 2" || bad "3p ack: $out"
  expect "3p: stats q after ack" 0 k3 --json queue stats q
  [ "$(jq -r '.messages' <<<"$out")" = 0 ] && ok "3p: q is empty" || bad "3p stats after ack: $out"
  expect "3p: delete empty q" 0 k3 --json queue delete q
  [ "$(jq -r '.results[0].kind' <<<"$out")" = queue_deleted ] && [ "$(jq -r '.partition' <<<"$out")" = 0 ] &&
    ok "3p: deleted (definition dropped on partition 0)" || bad "3p delete: $out"
  expect "3p: stats of the deleted q is NOT_FOUND" 1 k3 --json queue stats q
  [ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "3p: deleted q is NOT_FOUND" || bad "3p deleted stats: $out"
  expect "3p: enqueue into the deleted q is NOT_FOUND" 1 k3 --json enqueue q "late"
  [ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "3p: no enqueue into a deleted queue" ||
    bad "3p enqueue deleted: $out"
  expect "3p: re-create q" 0 k3 --json queue create q
  pq2=$(jq -r '.results[0].partition' <<<"$out")
  { [ "$pq2" = 1 ] || [ "$pq2" = 2 ]; } && ok "3p: q re-created on partition $pq2" || bad "3p re-create: $out"
  expect "3p: enqueue into the re-created q" 0 k3 enqueue q "again"
  expect "3p: stats of the re-created q" 0 k3 --json queue stats q
  [ "$(jq -r '.messages' <<<"$out")" = 1 ] && [ "$(jq -r '.partition' <<<"$out")" = "$pq2" ] &&
    ok "3p: re-created q holds 1 message, nothing of the old one" || bad "3p re-created stats: $out"
  expect "3p: stats q2" 0 k3 --json queue stats q2
  [ "$(jq -r '.messages' <<<"$out")" = 1 ] && [ "$(jq -r '.partition' <<<"$out")" = 2 ] &&
    ok "3p: q2 untouched on partition 2" || bad "3p q2 stats: $out"
fi
stop3
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
