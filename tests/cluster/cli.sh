#!/usr/bin/env bash
# CLI end to end against real keyloadd processes: the §10 contract (exit codes, --json
# shapes, replay with --command-id, tokens from stdin), the catalog on partition 0
# (`database create`, queue placement, the two-step queue delete) and principals
# (ARCHITECTURE.md "Sessions and RPC": bootstrap, sessions, create, grant, revoke, show, key rotation, limits).
# Sessions are required (neither cluster file sets insecure_local_admin): every command
# after `admin bootstrap` runs as a principal (KEYLOAD_PRINCIPAL/KEYLOAD_KEY).
# Part 1: a one-member, one-partition cluster started by deploy/keyload-cluster (which
# stops its member on exit). Part 2: three single-member partitions (replica_count 1)
# with member keys made here, started by hand and stopped by pid on exit. Ports:
# 27000-29999 (below the ephemeral range, 32768+), seven consecutive ones per run picked
# from the pid.
set -u
cd "$(dirname "$0")/../.."
. tests/support/flip_byte.sh
name="clitest$$"
base=$(( 27000 + ($$ % 427) * 7 ))   # base .. base+6 <= 29995
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
keys="$(mktemp -d)"   # principals' secret keys (0600 files); removed on exit
cleanup() {
  deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1
  stop3
  rm -rf "var/$name" "$cfg" "$dir3" "/tmp/cli-err.$$" "$keys"
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
# raw: no principal (the launcher's cluster file as given, without member public keys);
# kl: as the principal in KEYLOAD_PRINCIPAL/KEYLOAD_KEY once they are exported (below),
# with the cluster file that carries the member public keys.
raw() { timeout -k 5 60 env -u KEYLOAD_PRINCIPAL -u KEYLOAD_KEY ./bin/keyload --cluster "$cfg" "$@"; }
keyed="var/$name/cluster.json"
kl() { timeout -k 5 60 ./bin/keyload --cluster "$keyed" "$@"; }
guid() { cat /proc/sys/kernel/random/uuid; }

echo "--- one partition (deploy/keyload-cluster, port $port)"
deploy/keyload-cluster --config "$cfg" up >/dev/null || { echo "FAIL cluster up"; echo "0 passed, 1 failed"; exit 1; }

# Sessions are required: without one only Hello, MemberStatus and Bootstrap are served.
expect "without a session, queue create is refused (exit 1)" 1 raw --json queue create jobs --partition 0
[ "$(jq -r '.error.code' <<<"$out")" = UNAUTHENTICATED ] && [ "$(jq -r '.error.detail' <<<"$out")" = session_required ] &&
  ok "no session: UNAUTHENTICATED session_required" || bad "no session: $out"
expect "without a session, database create is refused (exit 1)" 1 raw --json database create
[ "$(jq -r '.error.detail' <<<"$out")" = session_required ] && ok "no session: database create refused" ||
  bad "no session database: $out"
# The first administrator: only with the cluster secret (the launcher's file by default),
# only once; the new key file is 0600 and is removed when the bootstrap is refused.
head -c 32 /dev/urandom >"$keys/wrong.secret" && chmod 600 "$keys/wrong.secret"
expect "bootstrap with another secret is UNAUTHENTICATED (exit 1)" 1 raw --json admin bootstrap --tenant default \
  --database first --admin root --key-out "$keys/bad.key" --cluster-secret "$keys/wrong.secret"
[ "$(jq -r '.error.detail' <<<"$out")" = bootstrap_proof ] && [ ! -e "$keys/bad.key" ] &&
  ok "wrong proof: detail bootstrap_proof, key file removed" || bad "wrong proof: $out"
expect "admin bootstrap" 0 raw admin bootstrap --tenant default --database first --admin root --key-out "$keys/root.key"
grep -q "^bootstrapped default/first: cluster administrator root (policy epoch 1)" <<<"$out" &&
  [ "$(stat -c %a "$keys/root.key")" = 600 ] && [ "$(stat -c %s "$keys/root.key")" = 64 ] &&
  ok "bootstrap receipt; key file 64 bytes, mode 600" || bad "bootstrap: $out $(ls -l "$keys")"
expect "second bootstrap is FAILED_PRECONDITION (exit 1)" 1 raw --json admin bootstrap --tenant default \
  --database second --admin root2 --key-out "$keys/root2.key"
[ "$(jq -r '.error.detail' <<<"$out")" = bootstrap_done ] && [ ! -e "$keys/root2.key" ] &&
  ok "second bootstrap: detail bootstrap_done, key file removed" || bad "second bootstrap: $out"
# From here on every command runs as the administrator root of tenant "default" (the
# tenant of the default database): sealed under a session, verified with the member keys
# of the launcher's var/<name>/cluster.json.
export KEYLOAD_PRINCIPAL=root KEYLOAD_KEY="$keys/root.key"
expect "queue create before its database is NOT_FOUND (exit 1)" 1 kl --json queue create jobs --partition 0
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && grep -q "default/default" <<<"$(jq -r '.error.message' <<<"$out")" &&
  ok "missing database: NOT_FOUND naming default/default" || bad "missing database: $out"
ks() { timeout -k 5 60 ./bin/keyload --cluster "$keyed" --database default/sess "$@"; }
root=(--principal root --key "$keys/root.key")
[ "$(jq -r '.partitions[0].members[0].public_key | length' "$keyed")" = 44 ] &&
  ok "the launcher's cluster.json carries the member's public key" || bad "no public key in $keyed"
expect "sealed: database create" 0 ks "${root[@]}" --json database create default/sess
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
  timeout -k 5 60 ./bin/keyload --cluster "$keyed" --database default/sess --json queue stats sq
./bin/keyloadd keygen --secret-out "$keys/other.key" >/dev/null
expect "sealed: another key is UNAUTHENTICATED (exit 1)" 1 ks --principal root --key "$keys/other.key" --json queue stats sq
[ "$(jq -r '.error.code' <<<"$out")" = UNAUTHENTICATED ] && [ "$(jq -r '.error.detail' <<<"$out")" = bad_signature ] &&
  ok "wrong key: UNAUTHENTICATED bad_signature" || bad "wrong key: $out"
expect "sealed: an unknown principal is UNAUTHENTICATED (exit 1)" 1 ks --principal ghost --key "$keys/root.key" --json queue stats sq
[ "$(jq -r '.error.code' <<<"$out")" = UNAUTHENTICATED ] && ok "unknown principal: UNAUTHENTICATED" || bad "ghost: $out"
expect "--principal without --key is a usage error (exit 2)" 2 env -u KEYLOAD_KEY \
  timeout -k 5 60 ./bin/keyload --cluster "$keyed" --principal root queue stats sq
expect "--key without --principal is a usage error (exit 2)" 2 env -u KEYLOAD_PRINCIPAL KEYLOAD_KEY="$keys/root.key" \
  timeout -k 5 60 ./bin/keyload --cluster "$keyed" queue stats sq
expect "a cluster file without public keys is refused (exit 1)" 1 raw "${root[@]}" --json queue stats sq
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
dbcmd=$(guid)
expect "database create" 0 kl database create --command-id "$dbcmd"
grep -Eq "^created database default/default, database id [0-9]+, catalog version [0-9]+ .*$dbcmd" <<<"$out" &&
  ok "database create prints its receipt" || bad "database receipt: $out"
first=$out
expect "database create replay" 0 kl database create --command-id "$dbcmd"
[ "$first" = "$out" ] && ok "replayed database receipt identical" || bad "database replay: $out / $first"
expect "database create again is CONFLICT (exit 1)" 1 kl --json database create default/default
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "database conflict JSON" || bad "database conflict JSON: $out"
expect "database create --json" 0 kl --json database create default/shop
[ "$(jq -s 'length' <<<"$out")" = 1 ] && [ "$(jq -r '.results | length' <<<"$out")" = 1 ] &&
  [ "$(jq -r '.results[0].kind' <<<"$out")" = database_created ] &&
  [ "$(jq -r '.results[0].database_id > 0 and .catalog_version > 0' <<<"$out")" = true ] &&
  ok "database create --json: one object, results[0].kind database_created" || bad "database JSON: $out"
expect "queue create in a missing database is NOT_FOUND (exit 1)" 1 kl --database default/nope --json queue create jobs
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && grep -q "default/nope" <<<"$(jq -r '.error.message' <<<"$out")" &&
  ok "NOT_FOUND names the database default/nope" || bad "missing database: $out"
expect "database create in another tenant is PERMISSION_DENIED (exit 1)" 1 kl --json database create acme/shop
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = tenant ] &&
  ok "another tenant: PERMISSION_DENIED tenant" || bad "another tenant: $out"
expect "database name without TENANT/ is refused (exit 1)" 1 kl --json database create 'no-slash'
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && ok "bad database name: INVALID_ARGUMENT" || bad "bad name: $out"
expect "database create with a limit above the cluster's is INVALID_ARGUMENT" 1 \
  kl --json database create default/big --max-batch-bytes 999999999
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
expect "same queue name in another database" 0 kl --database default/shop --json queue create jobs --max-messages 1
expect "enqueue into default/shop's jobs" 0 kl --database default/shop enqueue jobs "elsewhere"
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
expect "stats in default/shop" 0 kl --database default/shop --json queue stats jobs
[ "$(jq -r '.messages' <<<"$out")" = 1 ] && ok "databases keep their queues apart" || bad "shop stats: $out"
expect "receive" 0 kl --json receive jobs --max 2 --lease-ms 60000
mapfile -t leases < <(jq -r '.results[0].messages[].lease_token' <<<"$out" 2>/dev/null)
[ "${#leases[@]}" = 2 ] && ok "2 leases" || bad "receive: $out"
[ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = "body one" ] && ok "first body in order" || bad "order: $out"
expect "release from stdin" 0 bash -c "printf '%s\n' '${leases[1]:-}' | timeout 60 ./bin/keyload --cluster '$keyed' release jobs -"
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
# Long poll: a receive that leases nothing commits nothing; --wait-ms waits for a message.
expect "create lp" 0 kl queue create lp
expect "receive on an empty queue" 0 kl receive lp
grep -q "nothing committed" <<<"$out" && ok "empty receive: nothing committed" || bad "empty receive: $out"
t0=$(date +%s%N)
( sleep 1; kl enqueue lp late >/dev/null ) &
lp_pid=$!
expect "receive --wait-ms 20000" 0 kl --json receive lp --wait-ms 20000
wait "$lp_pid"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = late ] && [ "$ms" -lt 10000 ] &&
  ok "the long poll got the message enqueued meanwhile (${ms} ms)" || bad "long poll ($ms ms): $out"
expect "--wait-ms over 30000 is a usage error (exit 2)" 2 kl receive lp --wait-ms 30001
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

# ---- principals (ARCHITECTURE.md "Sessions and RPC"): create, grants with field and header lists, revoke,
# show, key rotation, a database administrator, database limits ----
echo "--- principals"
as() { local who=$1 key=$2; shift 2; timeout -k 5 60 ./bin/keyload --cluster "$keyed" --principal "$who" --key "$keys/$key" "$@"; }
pub_of() { ./bin/keyloadd keygen --public-of "$1" 2>/dev/null; }
expect "queue create orders.eu" 0 kl queue create orders.eu
expect "queue create other" 0 kl queue create other
pcmd=$(guid)
expect "principal create alice" 0 kl --json principal create alice --key-out "$keys/alice.key" --command-id "$pcmd"
pfirst=$out
[ "$(jq -r '.results[0].kind' <<<"$out")" = principal_changed ] && [ "$(jq -r '.results[0].principal_id' <<<"$out")" = alice ] &&
  [ "$(jq -r '.results[0].policy_epoch' <<<"$out")" = 1 ] && [ "$(jq -r '.results[0].changed' <<<"$out")" = true ] &&
  [ "$(jq -r '.results[0].key_id | length' <<<"$out")" = 12 ] &&
  [ "$(jq -r '.results[0].catalog_version > 0' <<<"$out")" = true ] &&
  ok "principal create: principal_changed, epoch 1, an 8-byte key id" || bad "principal create: $out"
[ "$(stat -c %a "$keys/alice.key"):$(stat -c %s "$keys/alice.key")" = 600:64 ] &&
  ok "alice's key file: mode 600, 64 bytes (admin bootstrap's format)" || bad "alice key: $(ls -l "$keys")"
expect "principal create replayed with --key-in" 0 kl --json principal create alice --key-in "$keys/alice.key" --command-id "$pcmd"
[ -n "$pfirst" ] && [ "$pfirst" = "$out" ] && ok "replayed principal receipt identical" || bad "create replay: $out / $pfirst"
expect "principal create alice again is CONFLICT (exit 1)" 1 kl --json principal create alice --key-out "$keys/dup.key"
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && [ ! -e "$keys/dup.key" ] &&
  ok "existing principal: CONFLICT, the new key file removed" || bad "create again: $out"
sum=$(sha256sum <"$keys/alice.key")
expect "principal create never overwrites a key file (exit 1)" 1 kl --json principal create carol --key-out "$keys/alice.key"
[ "$(jq -r '.error.code' <<<"$out")" = FAILED_PRECONDITION ] && [ "$(sha256sum <"$keys/alice.key")" = "$sum" ] &&
  ok "existing key file: FAILED_PRECONDITION, file untouched" || bad "overwrite: $out"
expect "principal show carol (never created) is NOT_FOUND (exit 1)" 1 kl --json principal show carol
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "carol: NOT_FOUND" || bad "show carol: $out"

gcmd=$(guid)
expect "grant alice QueuePublish on orders.* with --fields" 0 kl --json principal grant alice QueuePublish \
  --queue 'orders.*' --fields region,amount --command-id "$gcmd"
[ "$(jq -r '.results[0].policy_epoch' <<<"$out"):$(jq -r '.results[0].changed' <<<"$out")" = 2:true ] &&
  ok "grant: epoch 2, changed" || bad "grant: $out"
expect "the same grant again (fresh command id)" 0 kl --json principal grant alice QueuePublish --queue 'orders.*' --fields amount,region
[ "$(jq -r '.results[0].policy_epoch' <<<"$out"):$(jq -r '.results[0].changed' <<<"$out")" = 2:false ] &&
  ok "identical re-grant: epoch stays 2, changed false" || bad "re-grant: $out"
expect "principal show alice" 0 kl --json principal show alice
[ "$(jq -r '.policy_epoch' <<<"$out")" = 2 ] && [ "$(jq -r '.tenant' <<<"$out")" = default ] &&
  [ "$(jq -r '.role' <<<"$out")" = none ] &&
  [ "$(jq -c '.grants' <<<"$out")" = '[{"database":"default","permission":"QueuePublish","queue_pattern":"orders.*","fields":["amount","region"],"headers":[]}]' ] &&
  ok "show: epoch 2, one QueuePublish grant with fields amount,region" || bad "show alice: $out"
[ -n "$(pub_of "$keys/alice.key")" ] && [ "$(jq -r '.public_key' <<<"$out")" = "$(pub_of "$keys/alice.key")" ] &&
  ok "show: the public key of alice's key file" || bad "show public key: $out"
grep -qF "$(base64 -w0 "$keys/alice.key")" <<<"$out$pfirst" && bad "secret key bytes printed" || ok "no secret key in any output"
expect "principal show (human)" 0 kl principal show alice
grep -q "^principal alice of tenant default: no role; policy epoch 2" <<<"$out" &&
  grep -q "QueuePublish on default/default queue orders.\* (fields amount,region; headers none)" <<<"$out" &&
  ok "show (human): role, epoch and the grant" || bad "show human: $out"

acmd=$(guid)
expect "alice: enqueue with allowed fields" 0 as alice alice.key --json enqueue orders.eu --command-id "$acmd" \
  --field region=eu --field amount:int=5 "order one"
[ "$(jq -r '.results[0].kind' <<<"$out")" = enqueued ] && ok "alice enqueued" || bad "alice enqueue: $out"
expect "alice: a field outside the grant is refused (exit 1)" 1 as alice alice.key --json enqueue orders.eu --field secret=x "nope"
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = field_grant:QueuePublish ] &&
  ok "disallowed field: PERMISSION_DENIED field_grant:QueuePublish" || bad "disallowed field: $out"
grep -q '"x"\|nope' <<<"$out" && bad "the refusal echoes a value or the body" || ok "the refusal names no value or body"
expect "alice: a header (none granted) is refused (exit 1)" 1 as alice alice.key --json enqueue orders.eu --header h=1 "nope"
[ "$(jq -r '.error.detail' <<<"$out")" = header_grant:QueuePublish ] && ok "header: header_grant:QueuePublish" || bad "header: $out"
expect "alice: another queue is refused (exit 1)" 1 as alice alice.key --json enqueue other "nope"
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = grant:QueuePublish ] &&
  ok "other queue: PERMISSION_DENIED grant:QueuePublish" || bad "other queue: $out"
expect "alice: queue stats without QueueInspect is refused (exit 1)" 1 as alice alice.key --json queue stats orders.eu
[ "$(jq -r '.error.detail' <<<"$out")" = grant:QueueInspect ] && ok "stats: grant:QueueInspect" || bad "alice stats: $out"
expect "alice: principal create is refused (exit 1)" 1 as alice alice.key --json principal create mallory --key-out "$keys/m.key"
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = role:administrator ] &&
  [ ! -e "$keys/m.key" ] && ok "non-administrator: role:administrator, key file removed" || bad "alice create: $out"
expect "alice: grant herself more is refused (exit 1)" 1 as alice alice.key --json principal grant alice QueuePublish --queue '*' --fields '*'
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && ok "self-grant refused" || bad "self-grant: $out"
expect "alice: show herself" 0 as alice alice.key --json principal show alice
[ "$(jq -r '.principal_id' <<<"$out")" = alice ] && ok "a principal reads its own record" || bad "alice show self: $out"
expect "alice: show root is refused (exit 1)" 1 as alice alice.key --json principal show root
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && ok "alice may not read root's record" || bad "alice show root: $out"
expect "alice: database limits is refused (exit 1)" 1 as alice alice.key --json database limits --max-scan-records 10
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && ok "limits need an administrator" || bad "alice limits: $out"

expect "grant the same triple with --headers '*' (replaces the lists)" 0 kl principal grant alice QueuePublish \
  --queue 'orders.*' --fields amount,region --headers '*'
grep -q "^granted QueuePublish on default/default queue orders.\* to alice (fields amount,region; headers \*): policy epoch 3; catalog version" <<<"$out" &&
  ok "re-grant (human): lists replaced, epoch 3" || bad "re-grant human: $out"
expect "alice: a header is allowed now" 0 as alice alice.key --json enqueue orders.eu --header h=1 --field region=us "two"
expect "revoke" 0 kl --json principal revoke alice QueuePublish --queue 'orders.*'
[ "$(jq -r '.results[0].policy_epoch' <<<"$out"):$(jq -r '.results[0].changed' <<<"$out")" = 4:true ] &&
  ok "revoke: epoch 4" || bad "revoke: $out"
expect "revoke again" 0 kl principal revoke alice QueuePublish --queue 'orders.*'
grep -q "policy epoch 4 (unchanged: it held no such grant)" <<<"$out" && ok "absent revoke: unchanged" || bad "revoke again: $out"
expect "alice: enqueue after the revoke is refused (exit 1)" 1 as alice alice.key --json enqueue orders.eu --field region=eu "late"
[ "$(jq -r '.error.detail' <<<"$out")" = grant:QueuePublish ] && ok "revoked: grant:QueuePublish" || bad "after revoke: $out"
expect "alice: replay of a command authorized under epoch 2 (exit 1)" 1 as alice alice.key --json enqueue orders.eu \
  --command-id "$acmd" --field region=eu --field amount:int=5 "order one"
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = stale_authority ] &&
  ok "replay under another epoch: stale_authority" || bad "stale replay: $out"
expect "principal show after the revoke" 0 kl --json principal show alice
[ "$(jq -r '.policy_epoch' <<<"$out")" = 4 ] && [ "$(jq -r '.grants | length' <<<"$out")" = 0 ] &&
  ok "show: epoch 4, no grants" || bad "show after revoke: $out"
kid1=$(jq -r '.key_id' <<<"$out")
expect "grant alice QueueInspect on orders.eu" 0 kl principal grant alice QueueInspect --queue orders.eu

# Key rotation: by an administrator, then by the principal itself.
expect "principal rotate-key alice (by root)" 0 kl --json principal rotate-key alice --key-out "$keys/alice2.key"
kid2=$(jq -r '.results[0].key_id' <<<"$out")
[ -n "$kid2" ] && [ "$kid2" != "$kid1" ] && [ "$(jq -r '.results[0].policy_epoch' <<<"$out")" = 5 ] &&
  ok "rotate-key: a new key id" || bad "rotate: $out (was $kid1)"
expect "alice: the old key is refused (exit 1)" 1 as alice alice.key --json queue stats orders.eu
[ "$(jq -r '.error.code' <<<"$out")" = UNAUTHENTICATED ] && [ "$(jq -r '.error.detail' <<<"$out")" = bad_signature ] &&
  ok "old key: UNAUTHENTICATED bad_signature" || bad "old key: $out"
expect "alice: the new key works" 0 as alice alice2.key --json queue stats orders.eu
[ "$(jq -r '.messages' <<<"$out")" = 2 ] && ok "new key: stats (QueueInspect) show 2 messages" || bad "new key: $out"
expect "alice rotates her own key" 0 as alice alice2.key principal rotate-key alice --key-out "$keys/alice3.key"
grep -q "^new key for principal alice: key id " <<<"$out" && grep -qF "secret key in $keys/alice3.key" <<<"$out" &&
  ok "self rotation (human receipt)" || bad "self rotate: $out"
expect "alice: the second key is refused now (exit 1)" 1 as alice alice2.key --json principal show alice
expect "alice: the third key works" 0 as alice alice3.key --json principal show alice
[ "$(jq -r '.public_key' <<<"$out")" = "$(pub_of "$keys/alice3.key")" ] && ok "show: the third key's public key" ||
  bad "third key: $out"
sum=$(sha256sum <"$keys/alice3.key")
expect "rotate-key never overwrites a key file (exit 1)" 1 kl --json principal rotate-key alice --key-out "$keys/alice3.key"
[ "$(sha256sum <"$keys/alice3.key")" = "$sum" ] && ok "rotate-key: existing file untouched" || bad "rotate overwrite"
expect "principal rotate-key bob (no such principal) is NOT_FOUND (exit 1)" 1 kl --json principal rotate-key bob --key-out "$keys/bob.key"
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && [ ! -e "$keys/bob.key" ] && ok "rotate unknown: NOT_FOUND, key removed" ||
  bad "rotate bob: $out"

# A database administrator: everything inside its database, never a cluster administrator.
expect "principal create dba --role database-admin" 0 kl principal create dba --role database-admin --key-out "$keys/dba.key"
grep -q "^created principal dba in default/default (database administrator of default/default): key id .*, policy epoch 1; secret key in " <<<"$out" &&
  ok "database administrator created (human receipt)" || bad "dba: $out"
expect "dba: queue create in its database" 0 as dba dba.key --json queue create dbaq
expect "dba: queue create in another database is refused (exit 1)" 1 as dba dba.key --database default/shop --json queue create x
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && ok "dba: not an administrator of default/shop" || bad "dba shop: $out"
expect "dba: making a cluster administrator is refused (exit 1)" 1 as dba dba.key --json principal create boss --role cluster-admin --key-out "$keys/boss.key"
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = role:cluster_admin ] &&
  [ ! -e "$keys/boss.key" ] && ok "dba: role:cluster_admin, key file removed" || bad "dba boss: $out"
expect "dba: grant alice on its database" 0 as dba dba.key --json principal grant alice QueueConsume --queue dbaq --fields '*' --headers '*'
[ "$(jq -r '.results[0].changed' <<<"$out")" = true ] && ok "dba granted QueueConsume" || bad "dba grant: $out"

# ---- Q1 statements (keyload sql, keyload.v1.Query): the native effect and the native errors ----
echo "--- Q1 sql"
qcmd=$(guid)
q1enq="CALL keyload.queue.enqueue.v1(queue => 'orders.eu', body => 'q1 body', fields => {\"region\": \"eu\", \"amount\": 5}) WITH COMMAND_ID '$qcmd'"
# alice may publish to orders.* (her grant was revoked above: given back), but not Query yet.
expect "grant alice QueuePublish on orders.* again" 0 kl principal grant alice QueuePublish --queue 'orders.*' --fields amount,region
expect "alice: the native enqueue is allowed" 0 as alice alice3.key --json enqueue orders.eu --field region=eu "native"
expect "sql: alice without Query is refused (exit 1)" 1 as alice alice3.key --json sql "$q1enq"
[ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = grant:Query ] &&
  ok "sql without Query: PERMISSION_DENIED grant:Query" || bad "sql without Query: $out"
expect "grant alice Query on orders.*" 0 kl principal grant alice Query --queue 'orders.*'
expect "sql: alice enqueues with CALL" 0 as alice alice3.key --json sql "$q1enq"
qfirst=$(jq -c '.rows[0]' <<<"$out")
[ "$(jq -r '.rows | length' <<<"$out")" = 1 ] && [ "$(jq -r '.rows[0].results[0].kind' <<<"$out")" = enqueued ] &&
  [ "$(jq -r '.rows[0].command_id' <<<"$out")" = "$qcmd" ] && ok "sql: one row, the receipt under the statement's command id" ||
  bad "sql enqueue: $out"
expect "sql: replay with the same COMMAND_ID" 0 as alice alice3.key --json sql "$q1enq"
[ -n "$qfirst" ] && [ "$(jq -c '.rows[0]' <<<"$out")" = "$qfirst" ] && ok "sql: replayed receipt identical" || bad "sql replay: $out / $qfirst"
expect "sql: the native enqueue under that command id replays the same receipt" 0 as alice alice3.key --json enqueue orders.eu \
  --command-id "$qcmd" --field region=eu --field amount:int=5 "q1 body"
[ "$(jq -cS . <<<"$out")" = "$(jq -cS . <<<"$qfirst")" ] && ok "sql and native: one command, one receipt" || bad "sql vs native: $out / $qfirst"
expect "sql: same COMMAND_ID, other body is CONFLICT (exit 1)" 1 as alice alice3.key --json sql \
  "CALL keyload.queue.enqueue.v1(queue => 'orders.eu', body => 'other', fields => {\"region\": \"eu\", \"amount\": 5}) WITH COMMAND_ID '$qcmd'"
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "sql: reused command id: CONFLICT" || bad "sql conflict: $out"
expect "sql: a field outside alice's grant is refused as natively (exit 1)" 1 as alice alice3.key --json sql \
  "CALL keyload.queue.enqueue.v1(queue => 'orders.eu', body => 'nope', fields => {\"secret\": \"zz-value\"})"
[ "$(jq -r '.error.detail' <<<"$out")" = field_grant:QueuePublish ] && ! grep -q 'zz-value\|nope' <<<"$out" &&
  ok "sql: field_grant:QueuePublish, no value echoed" || bad "sql field: $out"
expect "sql: a syntax error is INVALID_ARGUMENT (exit 1)" 1 kl --json sql "CALL keyload.queue.enqueue.v1(queue => 'orders.eu' body => 'sekrit')"
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && grep -q "line 1, column 52: expected ',' or ')'" <<<"$(jq -r '.error.message' <<<"$out")" &&
  ! grep -q sekrit <<<"$out" && ok "sql syntax error: line and column, no value" || bad "sql syntax: $out"
expect "sql: an unknown alias is INVALID_ARGUMENT (exit 1)" 1 kl --json sql "CALL keyload.queue.purge.v1(queue => 'orders.eu')"
[ "$(jq -r '.error.detail' <<<"$out")" = alias ] && ok "sql unknown alias: detail alias" || bad "sql alias: $out"
expect "sql: a missing argument names it (exit 1)" 1 kl --json sql "call keyload.queue.receive.v1(max => 1)"
[ "$(jq -r '.error.detail' <<<"$out")" = queue ] && ok "sql missing argument: detail queue" || bad "sql missing: $out"
expect "sql: no STATEMENT is a usage error (exit 2)" 2 kl --json sql
expect "sql: receive (the administrator passes Query)" 0 kl --json sql "CALL keyload.queue.receive.v1(queue => 'orders.eu', max => 1, lease_ms => 60000);"
qlease=$(jq -r '.rows[0].results[0].messages[0].lease_token' <<<"$out" 2>/dev/null)
[ "$(jq -r '.rows[0].results[0].kind' <<<"$out")" = received ] && [ -n "$qlease" ] && [ "$qlease" != null ] &&
  ok "sql: received one message with a lease" || bad "sql receive: $out"
printf "CALL keyload.queue.ack.v1(queue => 'orders.eu',\n  lease_tokens => '%s')\n" "$qlease" >"$keys/ack.q1"
expect "sql: ack from @FILE" 0 kl --json sql "@$keys/ack.q1"
[ "$(jq -r '.rows[0].results[0].count' <<<"$out")" = 1 ] && ok "sql: acked 1 (statement from a file)" || bad "sql ack: $out"
expect "sql: the same ack from stdin fails as natively (exit 1)" 1 bash -c "timeout 60 ./bin/keyload --cluster '$keyed' --json sql - <'$keys/ack.q1'"
[ "$(jq -r '.error.code' <<<"$out")" = FAILED_PRECONDITION ] && ok "sql: acked twice: FAILED_PRECONDITION" || bad "sql ack twice: $out"
expect "sql: human output is one JSON line per row" 0 kl sql "CALL keyload.queue.enqueue.v1(queue => 'orders.eu', body => 'plain')"
[ "$(wc -l <<<"$out")" = 1 ] && [ "$(jq -r '.results[0].kind' <<<"$out")" = enqueued ] && ok "sql human: one row line" || bad "sql human: $out"
# Database limits: read back, and each option changes its limit only (the daemon merges).
expect "database limits without options prints the current limits" 0 kl --json database limits
[ "$(jq -r '.databases[0].database' <<<"$out")" = default ] && [ "$(jq -r '.databases[0].limits.max_batch_bytes' <<<"$out")" = 0 ] &&
  [ "$(jq -r '.databases[0].limits.max_queue_transfer_accept_attempts' <<<"$out")" = null ] &&
  ok "limits read back: the cluster's (0), accept attempts null" || bad "limits read: $out"
expect "database limits --command-id without a limit is a usage error (exit 2)" 2 kl --json database limits --command-id "$(guid)"
[ "$(jq -r '.error.detail' <<<"$out")" = usage ] && ok "limits: --command-id alone is a usage error" || bad "limits usage: $out"
# Membership: usage errors, the configuration in effect, a refused change naming its field.
expect "cluster without members|member is a usage error (exit 2)" 2 kl --json cluster
expect "cluster members without --partition is a usage error (exit 2)" 2 kl --json cluster members
expect "cluster member with an unknown op is a usage error (exit 2)" 2 kl --json cluster member frob --partition 0 --id 5
expect "cluster member add without --peer-url is a usage error (exit 2)" 2 kl --json cluster member add --partition 0 --id 5
expect "cluster member replace without --old is a usage error (exit 2)" 2 kl --json cluster member replace --partition 0 --id 5 --peer-url tcp://127.0.0.1:1
expect "cluster member add with a short --public-key is a usage error (exit 2)" 2 kl --json cluster member add --partition 0 --id 5 --peer-url tcp://127.0.0.1:1 --public-key abcd
expect "cluster members answers the configuration in effect" 0 kl --json cluster members --partition 0
[ "$(jq -r '.voters | length' <<<"$out")" -ge 1 ] && [ "$(jq -r '.committed' <<<"$out")" != null ] && [ "$(jq -r '.joint' <<<"$out")" = false ] &&
  ok "members: voters, committed, not joint" || bad "members: $out"
expect "an add whose replica_count exceeds the target's voters is INVALID_ARGUMENT (exit 1)" 1 kl --json cluster member add --partition 0 --id 5 --peer-url tcp://127.0.0.1:1 --replica-count 5
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && [ "$(jq -r '.error.detail' <<<"$out")" = replica_count ] &&
  ok "add refused naming replica_count" || bad "add replica_count: $out"
expect "removing a member that is no voter is done already (a retry after it finished)" 0 kl --json cluster member remove --partition 0 --id 99
[ "$(jq -r '.voters | length' <<<"$out")" -ge 1 ] && ok "remove of a non-voter answers the configuration" || bad "remove non-voter: $out"
expect "database limits above the cluster's is INVALID_ARGUMENT (exit 1)" 1 kl --json database limits --max-batch-bytes 999999999
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && [ "$(jq -r '.error.detail' <<<"$out")" = MaxBatchBytes ] &&
  ok "limit above the cluster's refused naming MaxBatchBytes" || bad "big limit: $out"
big=$(head -c 1500 /dev/zero | tr '\0' x)
expect "queue create keep" 0 kl queue create keep
expect "a 1500-byte message retained before the limit is lowered" 0 kl enqueue keep "$big"
lcmd=$(guid)
expect "database limits --max-batch-bytes 1024" 0 kl --json database limits --max-batch-bytes 1024 --command-id "$lcmd"
[ "$(jq -r '.results[0].kind' <<<"$out")" = database_limits_set ] && [ "$(jq -r '.results[0].limits.max_batch_bytes' <<<"$out")" = 1024 ] &&
  [ "$(jq -r '.results[0].limits.max_queue_transfer_accept_attempts' <<<"$out")" = null ] &&
  ok "limits set: max_batch_bytes 1024, accept attempts null" || bad "limits: $out"
lfirst=$out
expect "database limits replay" 0 kl --json database limits --max-batch-bytes 1024 --command-id "$lcmd"
[ "$lfirst" = "$out" ] && ok "replayed limits receipt identical" || bad "limits replay: $out"
expect "a batch over the database's MaxBatchBytes is refused (exit 1)" 1 kl --json enqueue orders.eu "$big"
[ "$(jq -r '.error.code' <<<"$out")" = RESOURCE_EXHAUSTED ] && [ "$(jq -r '.error.detail' <<<"$out")" = limit:MaxBatchBytes ] &&
  ok "too large: RESOURCE_EXHAUSTED limit:MaxBatchBytes" || bad "too large: $out"
expect "the message stored before the lower limit is still received" 0 kl --json receive keep --max 1
[ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = "$big" ] &&
  ok "lowering MaxBatchBytes kept the retained 1500-byte message" || bad "retained: $(head -c 200 <<<"$out")"
expect "the same batch in another database is fine" 0 kl --database default/sess enqueue sq "$big"
expect "dba: database limits (human)" 0 as dba dba.key database limits --max-scan-records 100 --max-transfer-accept-attempts 5
grep -q "^limits of default/default: MaxScanRecords 100, MaxBatchBytes 1024, MaxQueryReadBytes the cluster's, MaxQueueTransferAcceptAttempts 5; catalog version" <<<"$out" &&
  ok "dba changed two limits; MaxBatchBytes stays 1024" || bad "dba limits: $out"
expect "database limits read back (human)" 0 kl database limits default/default
grep -q "^limits of default/default: MaxScanRecords 100, MaxBatchBytes 1024, MaxQueryReadBytes the cluster's, MaxQueueTransferAcceptAttempts 5; catalog version [0-9]*$" <<<"$out" &&
  ok "limits read back as changed" || bad "limits read back: $out"
expect "accept attempts above MaxScanRecords is INVALID_ARGUMENT (exit 1)" 1 kl --json database limits --max-scan-records 10 --max-transfer-accept-attempts 11
[ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && ok "accept attempts > MaxScanRecords refused" || bad "attempts: $out"
expect "MaxScanRecords alone below the stored accept attempts is INVALID_ARGUMENT (exit 1)" 1 kl --json database limits --max-scan-records 3
[ "$(jq -r '.error.detail' <<<"$out")" = MaxQueueTransferAcceptAttempts ] &&
  ok "the merged limits are checked: stored accept attempts 5 > MaxScanRecords 3" || bad "merged check: $out"
# Two changes of different limits from two processes at once: both hold.
kl --json database limits --max-query-read-bytes 65536 >"$keys/l1.out" 2>&1 & lp1=$!
as dba dba.key --json database limits --max-scan-records 200 >"$keys/l2.out" 2>&1 & lp2=$!
wait "$lp1"; r1=$?; wait "$lp2"; r2=$?
[ "$r1" = 0 ] && [ "$r2" = 0 ] && ok "two concurrent limit changes answered OK" || bad "concurrent: $(cat "$keys/l1.out" "$keys/l2.out")"
expect "both concurrent changes are visible" 0 kl --json database limits
[ "$(jq -r '.databases[0].limits.max_query_read_bytes' <<<"$out")" = 65536 ] && [ "$(jq -r '.databases[0].limits.max_scan_records' <<<"$out")" = 200 ] &&
  [ "$(jq -r '.databases[0].limits.max_batch_bytes' <<<"$out")" = 1024 ] &&
  [ "$(jq -r '.databases[0].limits.max_queue_transfer_accept_attempts' <<<"$out")" = 5 ] &&
  ok "both concurrent changes kept, the other limits untouched" || bad "concurrent read: $out"
expect "database limits --max-batch-bytes 0: back to the cluster's" 0 kl database limits --max-batch-bytes 0
expect "the large batch fits again" 0 kl --json enqueue orders.eu "$big"
deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1

# ---- three partitions: placement chosen by partition 0, the two-step delete ----
echo "--- three partitions (ports $((base + 1))-$((base + 6)))"
cfg3="$dir3/cluster.json"
./bin/keyloadd keygen --cluster-secret-out "$dir3/cluster.secret" >/dev/null
pub3=()
for p in 0 1 2; do pub3+=("$(./bin/keyloadd keygen --secret-out "$dir3/p${p}m1.key")"); done
cat >"$cfg3" <<JSON
{"cluster":"${name}p3","replica_count":1,"limits":{"MaxBatchBytes":65536,"MaxFrameBytes":131072},
 "partitions":[
  {"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 1))","peer":"tcp://127.0.0.1:$((base + 4))","public_key":"${pub3[0]}"}]},
  {"id":1,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 2))","peer":"tcp://127.0.0.1:$((base + 5))","public_key":"${pub3[1]}"}]},
  {"id":2,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 3))","peer":"tcp://127.0.0.1:$((base + 6))","public_key":"${pub3[2]}"}]}]}
JSON
up3=1
for p in 0 1 2; do
  ./bin/keyloadd --cluster "$cfg3" --node "p${p}m1" --var "$dir3" --cluster-secret "$dir3/cluster.secret" \
    --member-key "$dir3/p${p}m1.key" --init-store >"$dir3/p${p}m1.log" 2>&1 &
  pids3+=($!)
done
for p in 0 1 2; do
  for _ in $(seq 1 200); do grep -q 'msg="ready"' "$dir3/p${p}m1.log" && break; sleep 0.05; done
  grep -q 'msg="ready"' "$dir3/p${p}m1.log" || { up3=0; bad "p${p}m1 not ready: $(tail -n 3 "$dir3/p${p}m1.log")"; }
done
if [ "$up3" = 1 ]; then
  # Sessions are required here too: bootstrap without one, then act as its administrator.
  expect "3p: admin bootstrap" 0 timeout -k 5 60 env -u KEYLOAD_PRINCIPAL -u KEYLOAD_KEY ./bin/keyload \
    --cluster "$cfg3" admin bootstrap --tenant default --database first --admin root3 --key-out "$keys/root3.key" \
    --cluster-secret "$dir3/cluster.secret"
  k3() { timeout -k 5 60 ./bin/keyload --cluster "$cfg3" --principal root3 --key "$keys/root3.key" "$@"; }
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
  # Grants are enforced on the data partitions, and a revoke holds when it returns.
  b3() { timeout -k 5 60 ./bin/keyload --cluster "$cfg3" --principal bob3 --key "$keys/bob3.key" "$@"; }
  expect "3p: principal create bob3" 0 k3 principal create bob3 --key-out "$keys/bob3.key"
  expect "3p: bob3 without a grant is refused on the data partition" 1 b3 --json enqueue q2 "no"
  [ "$(jq -r '.error.detail' <<<"$out")" = grant:QueuePublish ] && ok "3p: no grant: grant:QueuePublish" ||
    bad "3p no grant: $out"
  expect "3p: grant bob3 QueuePublish on q2" 0 k3 principal grant bob3 QueuePublish --queue q2
  expect "3p: bob3 enqueues into q2 (partition 2)" 0 b3 --json enqueue q2 "from bob"
  [ "$(jq -r '.partition' <<<"$out")" = 2 ] && ok "3p: bob3's enqueue committed on partition 2" || bad "3p bob3: $out"
  expect "3p: revoke bob3" 0 k3 principal revoke bob3 QueuePublish --queue q2
  expect "3p: right after the revoke, bob3 is refused" 1 b3 --json enqueue q2 "too late"
  [ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && ok "3p: the revoke holds at once on partition 2" ||
    bad "3p after revoke: $out"
  # ---- catalog lists (ListCatalog on partition 0), paged past --max ----
  for qn in p5 p3 p1 p4 p2; do expect "3p: queue create $qn" 0 k3 queue create "$qn"; done
  want=$(printf '%s\n' p1 p2 p3 p4 p5 q q-text q2 | LC_ALL=C sort)
  got=""; cur=""; pages=0
  while [ "$pages" -lt 10 ]; do
    if [ -n "$cur" ]; then expect "3p: queue list page $((pages + 1))" 0 k3 --json queue list --max 3 --cursor "$cur"
    else expect "3p: queue list page 1" 0 k3 --json queue list --max 3; fi
    pages=$((pages + 1))
    [ "$(jq '.queues | length' <<<"$out")" -le 3 ] || bad "3p: a page holds more than --max: $out"
    got+=$(jq -r '.queues[].queue' <<<"$out")$'\n'
    cur=$(jq -r '.next_cursor // empty' <<<"$out")
    [ -z "$cur" ] && break
  done
  [ "$(sed '/^$/d' <<<"$got")" = "$want" ] && [ "$pages" = 3 ] &&
    ok "3p: queue list in 3 pages of at most 3: every queue exactly once, in name order" || bad "3p queue pages ($pages): $got"
  expect "3p: queue list (human) prints the next cursor" 0 k3 queue list --max 7
  [ "$(grep -c 'partition [0-2]  id ' <<<"$out")" = 7 ] && hcur=$(sed -n 's/^next cursor: //p' <<<"$out") && [ -n "$hcur" ] &&
    ok "3p: human list: 7 lines and a next cursor" || bad "3p human list: $out"
  expect "3p: the human cursor continues the list" 0 k3 --json queue list --cursor "$hcur"
  [ "$(jq -r '[.queues[].queue] | join(",")' <<<"$out")" = q2 ] && [ "$(jq -r '.next_cursor' <<<"$out")" = null ] &&
    ok "3p: last page: q2, no cursor" || bad "3p last page: $out"
  expect "3p: a malformed cursor is INVALID_ARGUMENT (exit 1)" 1 k3 --json queue list --cursor CQkJ
  [ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ] && [ "$(jq -r '.error.detail' <<<"$out")" = cursor ] &&
    ok "3p: malformed cursor refused naming cursor" || bad "3p bad cursor: $out"
  expect "3p: a cursor that is not base64 is a usage error (exit 2)" 2 k3 --json queue list --cursor '!!'
  expect "3p: --max above the limit is a usage error (exit 2)" 2 k3 --json queue list --max 1001
  expect "3p: database list --max 1" 0 k3 --json database list --max 1
  d1=$(jq -r '.databases[0].database' <<<"$out"); dcur=$(jq -r '.next_cursor' <<<"$out")
  expect "3p: database list page 2" 0 k3 --json database list --max 1 --cursor "$dcur"
  [ "$d1" = default ] && [ "$(jq -r '[.databases[].database] | join(",")' <<<"$out")" = first ] &&
    [ "$(jq -r '.next_cursor' <<<"$out")" = null ] && ok "3p: database list: default, then first" || bad "3p db list: $d1 $out"
  expect "3p: principal list" 0 k3 --json principal list
  [ "$(jq -r '[.principals[].principal_id] | join(",")' <<<"$out")" = bob3,root3 ] &&
    [ "$(jq -r '.principals[1].role' <<<"$out")" = cluster-admin ] && ok "3p: principal list: bob3, root3" || bad "3p principal list: $out"
  for what in "principal list" "queue list" "database list" "database limits"; do
    expect "3p: bob3 (no administrator): $what is refused (exit 1)" 1 b3 --json $what
    [ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = role:administrator ] &&
      ok "3p: bob3 $what: PERMISSION_DENIED role:administrator" || bad "3p bob3 $what: $out"
  done
  # ---- remote transfers (ARCHITECTURE.md "Seed rules"): partition 1 -> partition 2 by hand ----
  echo "--- transfers"
  expect "3p: queue create xsrc on partition 1" 0 k3 --json queue create xsrc --partition 1
  expect "3p: queue create xdst on partition 2" 0 k3 --json queue create xdst --partition 2
  expect "3p: queue create xnear on partition 1" 0 k3 --json queue create xnear --partition 1
  xid=$(guid)
  expect "3p: transfer create without data grants is refused (admin flags off)" 1 \
    k3 --json transfer create --source xsrc --id "$xid" --dest xdst "moved body"
  [ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] && [ "$(jq -r '.error.detail' <<<"$out")" = grant:QueuePublish ] &&
    ok "3p: administrator without grants: grant:QueuePublish" || bad "3p xfer no grant: $out"
  for perm in QueuePublish QueueInspect QueueConsume QueueAck; do
    expect "3p: grant root3 $perm on x*" 0 k3 principal grant root3 "$perm" --queue 'x*'
  done
  expect "3p: transfer to the same partition is refused" 1 \
    k3 --json transfer create --source xsrc --id "$xid" --dest xnear "moved body"
  [ "$(jq -r '.error.detail' <<<"$out")" = same_partition ] && grep -q -- "--partition" <<<"$(jq -r '.error.message' <<<"$out")" &&
    ok "3p: same partition: detail same_partition, says how to pin" || bad "3p same partition: $out"
  expect "3p: transfer create" 0 k3 --json transfer create --source xsrc --id "$xid" --dest xdst \
    --token-out "$keys/intent.tok" "moved body"
  [ "$(jq -r '.results[0].kind' <<<"$out")" = transfer_created ] && [ "$(jq -r '.results[0].state' <<<"$out")" = OutputPending ] &&
    [ "$(stat -c %a "$keys/intent.tok")" = 600 ] && ok "3p: created OutputPending, token file 0600" || bad "3p create: $out"
  grep -q "moved body" <<<"$(jq -c 'del(.results[0].intent_token)' <<<"$out")" && bad "3p: create echoes the body" ||
    ok "3p: create prints no body"
  expect "3p: transfer create again (same id and body)" 0 k3 --json transfer create --source xsrc --id "$xid" --dest xdst "moved body"
  [ "$(jq -r '.results[0].existing' <<<"$out")" = true ] && ok "3p: same identity answers the existing intent" || bad "3p same id: $out"
  expect "3p: same id, other body is CONFLICT" 1 k3 --json transfer create --source xsrc --id "$xid" --dest xdst "other body"
  [ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "3p: changed payload conflicts" || bad "3p conflict: $out"
  expect "3p: transfer pending lists it" 0 k3 --json transfer pending --source xsrc
  [ "$(jq -r '.items | length' <<<"$out")" = 1 ] && ok "3p: one pending intent" || bad "3p pending: $out"
  expect "3p: a token on the command line is a usage error" 2 k3 transfer accept --dest xdst --intent "$(base64 -w0 "$keys/intent.tok")"
  acmd=$(guid)
  expect "3p: transfer accept from a file" 0 k3 --json transfer accept --dest xdst --intent "@$keys/intent.tok" --command-id "$acmd"
  [ "$(jq -r '.results[0].deduplicated' <<<"$out")" = false ] && ok "3p: accepted (enqueued)" || bad "3p accept: $out"
  expect "3p: transfer accept again from stdin (new command id)" 0 \
    bash -c "timeout 60 ./bin/keyload --cluster '$cfg3' --principal root3 --key '$keys/root3.key' --json transfer accept --dest xdst --intent - <'$keys/intent.tok'"
  [ "$(jq -r '.results[0].deduplicated' <<<"$out")" = true ] && ok "3p: a retry is deduplicated" || bad "3p dedup: $out"
  expect "3p: stats xdst" 0 k3 --json queue stats xdst
  [ "$(jq -r '.messages' <<<"$out")" = 1 ] && ok "3p: exactly one message at the destination" || bad "3p xdst stats: $out"
  expect "3p: transfer receipt" 0 k3 --json transfer receipt --dest xdst --source xsrc --id "$xid" --token-out "$keys/receipt.tok"
  [ "$(jq -r '.target_commit.partition' <<<"$out")" = 2 ] && [ -s "$keys/receipt.tok" ] &&
    ok "3p: receipt names its commit on partition 2" || bad "3p receipt: $out"
  expect "3p: transfer inspect before completion" 0 k3 --json transfer inspect --source xsrc --id "$xid"
  [ "$(jq -r '.state' <<<"$out")" = OutputPending ] && ok "3p: still OutputPending with a receipt at the destination" ||
    bad "3p inspect pending: $out"
  cp "$keys/receipt.tok" "$keys/bad.tok" && flip_byte "$keys/bad.tok" 20
  expect "3p: a tampered receipt is refused" 1 k3 --json transfer complete --source xsrc --id "$xid" --receipt "@$keys/bad.tok"
  { [ "$(jq -r '.error.code' <<<"$out")" = PERMISSION_DENIED ] || [ "$(jq -r '.error.code' <<<"$out")" = INVALID_ARGUMENT ]; } &&
    ok "3p: tampered receipt refused" || bad "3p tampered: $out"
  expect "3p: transfer complete" 0 k3 --json transfer complete --source xsrc --id "$xid" --receipt "@$keys/receipt.tok"
  [ "$(jq -r '.results[0].state' <<<"$out")" = Delivered ] && ok "3p: Delivered" || bad "3p complete: $out"
  expect "3p: transfer complete again is stable" 0 k3 --json transfer complete --source xsrc --id "$xid" --receipt "@$keys/receipt.tok"
  [ "$(jq -r '.results[0].already' <<<"$out")" = true ] && ok "3p: duplicate completion answers already" || bad "3p complete again: $out"
  expect "3p: transfer inspect" 0 k3 --json transfer inspect --source xsrc --id "$xid"
  [ "$(jq -r '.state' <<<"$out")" = Delivered ] && [ "$(jq -r '.history | length' <<<"$out")" = 2 ] &&
    ok "3p: inspect shows Delivered and two history events" || bad "3p inspect: $out"
  expect "3p: transfer pending is empty" 0 k3 --json transfer pending --source xsrc
  [ "$(jq -r '.items | length' <<<"$out")" = 0 ] && ok "3p: nothing pending" || bad "3p pending after: $out"
  # ---- the five transfer aliases through keyload sql: Query checked with admin flags off ----
  sql_inspect="CALL keyload.queue-transfer.inspect.v1(source_queue => 'xsrc', transfer_id => '$xid')"
  expect "3p sql: inspect without Query is refused, administrator or not (exit 1)" 1 k3 --json sql "$sql_inspect"
  [ "$(jq -r '.error.detail' <<<"$out")" = grant:Query ] && ok "3p sql: grant:Query" || bad "3p sql no Query: $out"
  expect "3p: grant root3 Query on x*" 0 k3 principal grant root3 Query --queue 'x*'
  expect "3p sql: inspect" 0 k3 --json sql "$sql_inspect"
  [ "$(jq -r '.rows[0].state' <<<"$out")" = Delivered ] && ok "3p sql: inspect row says Delivered" || bad "3p sql inspect: $out"
  expect "3p sql: native inspect prints the same object" 0 k3 --json transfer inspect --source xsrc --id "$xid"
  [ "$(jq -cS 'del(.applied_index)' <<<"$out")" = "$(k3 --json sql "$sql_inspect" | jq -cS '.rows[0] | del(.applied_index)')" ] &&
    ok "3p sql: one serializer for native and CALL" || bad "3p sql vs native inspect: $out"
  qid=$(guid)
  expect "3p sql: create" 0 k3 --json sql "CALL keyload.queue-transfer.create.v1(source_queue => 'xsrc', transfer_id => '$qid', destination_queue => 'xdst', body => 'sql moved')"
  qintent=$(jq -r '.rows[0].results[0].intent_token' <<<"$out")
  [ "$(jq -r '.rows[0].results[0].state' <<<"$out")" = OutputPending ] && ok "3p sql: created OutputPending" || bad "3p sql create: $out"
  acmd3=$(guid)
  printf "CALL keyload.queue-transfer.accept.v1(destination_queue => 'xdst', intent_token => '%s') WITH COMMAND_ID '%s'" "$qintent" "$acmd3" >"$keys/accept.q1"
  expect "3p sql: accept (statement from stdin)" 0 bash -c "timeout 60 ./bin/keyload --cluster '$cfg3' --principal root3 --key '$keys/root3.key' --json sql - <'$keys/accept.q1'"
  qacc=$(jq -c '.rows[0]' <<<"$out")
  [ "$(jq -r '.rows[0].results[0].kind' <<<"$out")" = transfer_accepted ] && [ "$(jq -r '.rows[0].partition' <<<"$out")" = 2 ] &&
    ok "3p sql: accepted on the destination's partition" || bad "3p sql accept: $out"
  expect "3p sql: accept replayed" 0 k3 --json sql "@$keys/accept.q1"
  [ "$(jq -c '.rows[0]' <<<"$out")" = "$qacc" ] && ok "3p sql: replayed accept receipt identical" || bad "3p sql accept replay: $out"
  expect "3p sql: inspect-receipt" 0 k3 --json sql "CALL keyload.queue-transfer.inspect-receipt.v1(destination_queue => 'xdst', source_queue => 'xsrc', transfer_id => '$qid')"
  qrec=$(jq -r '.rows[0].receipt_token' <<<"$out")
  [ -n "$qrec" ] && [ "$qrec" != null ] && ok "3p sql: receipt token read" || bad "3p sql receipt: $out"
  printf "CALL keyload.queue-transfer.complete.v1(source_queue => 'xsrc', transfer_id => '%s', receipt_token => '%s');" "$qid" "$qrec" >"$keys/complete.q1"
  expect "3p sql: complete" 0 k3 --json sql "@$keys/complete.q1"
  [ "$(jq -r '.rows[0].results[0].state' <<<"$out")" = Delivered ] && ok "3p sql: complete -> Delivered" || bad "3p sql complete: $out"
  expect "3p sql: inspect after complete" 0 k3 --json sql "CALL keyload.queue-transfer.inspect.v1(source_queue => 'xsrc', transfer_id => '$qid')"
  [ "$(jq -r '.rows[0].state' <<<"$out")" = Delivered ] && ok "3p sql: the CALL-driven transfer is Delivered" || bad "3p sql inspect 2: $out"
  expect "3p: transfer pause xsrc" 0 k3 --json transfer pause --source xsrc
  expect "3p: a paused lane takes no new transfer" 1 k3 --json transfer create --source xsrc --id "$(guid)" --dest xdst "p"
  [ "$(jq -r '.error.detail' <<<"$out")" = transfers_paused ] && ok "3p: paused: transfers_paused" || bad "3p paused: $out"
  expect "3p: transfer resume xsrc" 0 k3 --json transfer resume --source xsrc
  expect "3p: transfer create after resume" 0 k3 --json transfer create --source xsrc --id "$(guid)" --dest xdst "after"
  expect "3p: a queue retaining transfer records cannot be deleted" 1 k3 --json queue delete xdst
  expect "3p: receive the transferred message" 0 k3 --json receive xdst --max 1
  [ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = "moved body" ] && ok "3p: the destination holds the body" ||
    bad "3p receive xdst: $out"
fi
stop3
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
