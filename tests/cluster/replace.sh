#!/usr/bin/env bash
# deploy/keyload-cluster replace on a real 3-member RF3 partition (replica_count 3, member
# keys, sealed client sessions): a writer keeps enqueueing (each message retried under its
# own command id until acknowledged), member p0m2 is killed -9 (writes stop: 3-of-3 cannot
# commit without it), the other two are killed -9 and started again, then `replace p0m2` gives
# the node a new member id and key pair, joins it and replaces the old member; writes resume, the launcher prints the write outage it
# measured (command to the first acknowledged probe write), no key is printed, and every
# acknowledged message is in the queue exactly once. Ports 31000-31799 (below the ephemeral
# range); every process it starts is stopped on exit by pid, never by name.
set -u
cd "$(dirname "$0")/../.." || exit 1
t_start=$(date +%s)
name="replacetest$$"
base=$(( 31000 + ($$ % 100) * 8 ))
mkdir -p var
cfg=$(mktemp "$PWD/var/replace-XXXXXX.json")
var="var/$name"
passed=0 failed=0 writer=""
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
. tests/support/stop_dir.sh

cleanup() {
  [ -n "$writer" ] && kill "$writer" 2>/dev/null
  stop_dir "$var"
  rm -rf "$var" "$cfg"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
finish() {
  echo "replace.sh: $passed passed, $failed failed in $(( $(date +%s) - t_start )) s"
  [ "$failed" -eq 0 ]
  exit $?
}

# Partition 0 of local-rf3.json alone: 3 members, replica_count 3.
jq --arg name "$name" --argjson base "$base" '
  .cluster = $name
  | .partitions = [.partitions[0]]
  | del(.partitions[].members[].metrics)
  | .partitions[0].members |= (to_entries | map(.key as $mi | .value
      | .client = "tcp://127.0.0.1:\($base + $mi)"
      | .peer = "tcp://127.0.0.1:\($base + 4 + $mi)"))' deploy/local-rf3.json >"$cfg"
kc() { timeout 200 deploy/keyload-cluster --config "$cfg" "$@"; }
if ! out=$(kc up 2>&1); then bad "cluster up"; echo "$out" | tail -5; finish; fi
ok "cluster up"
key="$var/root.key"
check "admin bootstrap" timeout 60 ./bin/keyload --cluster "$var/cluster.json" admin bootstrap --tenant rp \
  --database db --admin root --key-out "$key" --cluster-secret "$var/cluster.secret" >/dev/null
k() { timeout 30 ./bin/keyload --cluster "$var/cluster.json" --database rp/db --principal root --key "$key" "$@"; }
check "queue create" k queue create jobs --partition 0 >/dev/null

# The writer: message w-<i> is retried under one command id until acknowledged; each
# acknowledged index goes to acked.txt (so an acknowledgement is never counted twice).
acked="$var/acked.txt"
: >"$acked"
(
  i=0
  while [ ! -e "$var/stop-writer" ]; do
    cid=$(cat /proc/sys/kernel/random/uuid)
    until [ -e "$var/stop-writer" ]; do
      if timeout 10 ./bin/keyload --cluster "$var/cluster.json" --database rp/db --principal root \
           --key "$key" --timeout 2000 enqueue jobs --command-id "$cid" "w-$i" >/dev/null 2>&1; then
        echo "$i" >>"$acked"
        break
      fi
      sleep 0.1
    done
    i=$((i + 1))
  done
) &
writer=$!
for _ in $(seq 1 100); do [ "$(wc -l <"$acked")" -ge 10 ] && break; sleep 0.1; done
check "the writer got 10 writes acknowledged before the kill" [ "$(wc -l <"$acked")" -ge 10 ]

# kill9 NODE: kill -9 the node's member by its pid and wait (5 s at most) until it is gone.
kill9() {
  local id; id=$(proc_id "$(cat "$var/$1.pid")")
  kill -KILL "${id%%:*}"
  for _ in $(seq 1 100); do ended "$id" && break; sleep 0.05; done
  check "$1 killed -9" ended "$id"
}
kill9 p0m2
sleep 1
n_dead=$(wc -l <"$acked")
sleep 2
check "3-of-3 without p0m2: no write acknowledged for 2 s" [ "$(wc -l <"$acked")" -le $((n_dead + 1)) ]
# Both survivors are killed -9 and started again too. With p0m2 dead no no-op of a new
# term can ever commit, and applies skip RocksDB's WAL, so each restarts knowing committed
# only what its stored commit index says: that index must not lag behind what it held
# committed (it rides on the next log write), and a new leader must also take the other's
# report of it, or nothing is applied, every Hello is refused catalog_behind and the
# replacement cannot start.
kill9 p0m1
kill9 p0m3
for n in p0m1 p0m3; do
  if kc start "$n" >/dev/null; then ok "$n started again"; else bad "$n started again"; fi
done
old_pub=$(cat "$var/p0m2.pub")
cp "$var/cluster.json" "$var/cluster.json.before"

out=$(KEYLOAD_DATABASE=rp/db KEYLOAD_PRINCIPAL=root KEYLOAD_KEY="$key" kc replace p0m2 --probe-queue jobs 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
check "replace p0m2 succeeds" [ "$rc" = 0 ]
outage=$(sed -n 's/.*write outage \([0-9]*\) ms (command to the first acknowledged write.*/\1/p' <<<"$out")
check "replace printed the write outage it measured" [ -n "$outage" ]
echo "# write outage measured by replace: ${outage:-none} ms"
check "the node got a new member id (4)" [ "$(cat "$var/p0m2.id" 2>/dev/null)" = 4 ]
check "the node got a new key pair" [ -s "$var/p0m2.pub" ] && [ "$(cat "$var/p0m2.pub")" != "$old_pub" ]
check "cluster.json names member 4 with the new key, not member 2" \
  [ "$(jq -c '[.partitions[0].members[] | .id] | sort' "$var/cluster.json")" = '[1,3,4]' ]
leaked=0
for f in "$var/cluster.secret" "$var"/p*m*.key "$key"; do
  grep -qF "$(base64 -w0 "$f")" <<<"$out" && leaked=1
  grep -qF "$(od -An -v -tx1 "$f" | tr -d ' \n' | cut -c1-64)" <<<"$out" && leaked=1
done
check "replace printed no key" [ $leaked -eq 0 ]
m=$(k --json cluster members --partition 0)
check "Members: voters {1,3,4}, committed, not joint, replica_count 3" \
  [ "$(jq -c '[(.voters | sort), .committed, .joint, .replica_count]' <<<"$m")" = '[[1,3,4],true,false,3]' ]
check "no joining marker, replace record nor join file left" \
  [ ! -e "$var/p0m2.joining" ] && [ ! -e "$var/p0m2.replace" ] && [ ! -e "$var/p0m2.join.json" ]
n_after=$(wc -l <"$acked")
for _ in $(seq 1 100); do [ "$(wc -l <"$acked")" -ge $((n_after + 10)) ] && break; sleep 0.1; done
check "writes resume: 10 more acknowledged after the replace" [ "$(wc -l <"$acked")" -ge $((n_after + 10)) ]
st=$(kc status --json 2>/dev/null)
check "status shows the new member p0m4 running under the node p0m2" \
  [ "$(jq -r '[.partitions[0].members[] | select(.node == "p0m4") | .state][0]' <<<"$st")" = running ]
# status shows the configuration from Members, not from the file: with the file of before
# the replace (members 1, 2, 3) put back, it still shows voters 1, 3, 4 and member 4's URL.
cp "$var/cluster.json" "$var/cluster.json.after"
cp "$var/cluster.json.before" "$var/cluster.json"
st=$(kc status --json 2>/dev/null)
check "status --json with the old file: configuration voters {1,3,4} (from Members)" \
  [ "$(jq -c '.partitions[0].configuration | [(.voters | sort), .committed]' <<<"$st" 2>/dev/null)" = '[[1,3,4],true]' ]
check "... and member 4's client URL (p0m2's) in its directory" \
  [ "$(jq -r '.partitions[0].configuration.directory[] | select(.id == 4) | .client_url' <<<"$st" 2>/dev/null)" = \
    "$(jq -r '.partitions[0].members[] | select(.id == 2) | .client' "$var/cluster.json.before")" ]
human=$(kc status 2>&1)
check "status prints the configuration line" grep -q '^  configuration (Members, answered by member [134]): voters [134],[134],[134], replica_count 3' <<<"$human"
cp "$var/cluster.json.after" "$var/cluster.json"
: >"$var/stop-writer"
wait "$writer"
writer=""
# A restart of every member keeps the new configuration and the new member.
check "restart --cold after the replace" kc restart --cold >/dev/null
m=""
for _ in $(seq 1 60); do
  m=$(k --json cluster members --partition 0 2>/dev/null) && [ "$(jq -c '.voters | sort' <<<"$m")" = '[1,3,4]' ] && break
  sleep 0.5
done
check "after restart --cold: voters {1,3,4} from a stored configuration (not the file's)" \
  [ "$(jq -c '[(.voters | sort), (.conf_index > 0), .committed]' <<<"$m" 2>/dev/null)" = '[[1,3,4],true,true]' ]

# Every acknowledged message exactly once (and the probe once).
got=""
for _ in $(seq 1 200); do
  page=$(k --json receive jobs --max 100 --lease-ms 600000 2>/dev/null) || { sleep 0.5; continue; }
  bodies=$(jq -r '.results[0].messages[].body_utf8' <<<"$page" 2>/dev/null)
  [ -z "$bodies" ] && break
  got="$got$bodies"$'\n'
done
n_acked=$(sort -u "$acked" | wc -l)
missing=0
for i in $(sort -un "$acked"); do grep -qx "w-$i" <<<"$got" || missing=$((missing + 1)); done
dups=$(grep '^w-' <<<"$got" | sort | uniq -d | wc -l)
echo "# $n_acked writes acknowledged; $(grep -c '^w-' <<<"$got") w-* messages received, $missing missing, $dups twice"
check "nothing acknowledged lost ($n_acked acknowledged)" [ "$missing" = 0 ]
check "nothing twice" [ "$dups" = 0 ]
check "the probe message is there once" [ "$(grep -c '^keyload-cluster replace probe$' <<<"$got")" = 1 ]
check "down" kc down >/dev/null
finish
