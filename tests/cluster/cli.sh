#!/usr/bin/env bash
# CLI end to end against a real keyloadd started by deploy/keyload-cluster: the §10
# contract (exit codes, --json shapes, replay with --command-id, tokens from stdin).
# Uses its own cluster file and port; the launcher stops its member on exit.
set -u
cd "$(dirname "$0")/../.."
name="clitest$$"
port=$(( 27000 + $$ % 3000 ))   # below the ephemeral range (32768+)
cfg=$(mktemp "$PWD/var/cli-XXXXXX.json")
cat >"$cfg" <<JSON
{"cluster":"$name","replica_count":1,"limits":{"MaxBatchBytes":65536,"MaxFrameBytes":131072},
 "partitions":[{"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$port"}]}]}
JSON
cleanup() { deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1; rm -rf "var/$name" "$cfg"; }
trap cleanup EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
expect() { # expect NAME WANT_EXIT CMD... ; keeps stdout in $out
  local n=$1 want=$2; shift 2
  out=$("$@" 2>/tmp/cli-err.$$); local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$n"; else bad "$n (exit $rc, want $want): $(cat /tmp/cli-err.$$)"; fi
}
kl() { ./bin/keyload --cluster "$cfg" "$@"; }

deploy/keyload-cluster --config "$cfg" up >/dev/null || { echo "FAIL cluster up"; echo "0 passed, 1 failed"; exit 1; }

expect "queue create" 0 kl --json queue create jobs --partition 0 --max-messages 3
[ "$(jq -r '.results[0].kind' <<<"$out")" = queue_created ] && ok "create receipt kind" || bad "create receipt: $out"
expect "queue create again is CONFLICT (exit 1)" 1 kl --json queue create jobs --partition 0
[ "$(jq -r '.error.code' <<<"$out")" = CONFLICT ] && ok "conflict JSON" || bad "conflict JSON: $out"
cmd=$(cat /proc/sys/kernel/random/uuid)
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
expect "receive" 0 kl --json receive jobs --max 2 --lease-ms 60000
mapfile -t leases < <(jq -r '.results[0].messages[].lease_token' <<<"$out")
[ "${#leases[@]}" = 2 ] && ok "2 leases" || bad "receive: $out"
[ "$(jq -r '.results[0].messages[0].body_utf8' <<<"$out")" = "body one" ] && ok "first body in order" || bad "order: $out"
expect "release from stdin" 0 bash -c "printf '%s\n' '${leases[1]}' | ./bin/keyload --cluster '$cfg' release jobs -"
expect "ack" 0 kl ack jobs "${leases[0]}"
expect "ack twice is FAILED_PRECONDITION" 1 kl --json ack jobs "${leases[0]}"
[ "$(jq -r '.error.code' <<<"$out")" = FAILED_PRECONDITION ] && ok "stale lease code" || bad "stale lease: $out"
expect "delete non-empty refused" 1 kl queue delete jobs
expect "all-zero GUID is refused" 1 kl --json enqueue --command-id 00000000-0000-0000-0000-000000000000 jobs x
expect "unknown command exits 2" 2 kl frobnicate
expect "missing queue is NOT_FOUND" 1 kl --json queue stats nope
[ "$(jq -r '.error.code' <<<"$out")" = NOT_FOUND ] && ok "not found code" || bad "not found: $out"
deploy/keyload-cluster --config "$cfg" kill p0m1 >/dev/null
expect "down member is UNAVAILABLE (exit 1)" 1 kl --timeout 1000 queue stats jobs
deploy/keyload-cluster --config "$cfg" start p0m1 >/dev/null
expect "after restart" 0 kl --json queue stats jobs
[ "$(jq -r '.messages' <<<"$out")" = 2 ] && ok "2 messages after kill -9 and restart" || bad "after restart: $out"
rm -f /tmp/cli-err.$$
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
