#!/usr/bin/env bash
# deploy/keyload-cluster replace on a DATA partition, three times over: partition 1 of a
# two-partition cluster (replica_count 3, member keys, sealed sessions) gets every one of its
# members replaced by a new identity in turn (replace p1m1, p1m2, p1m3), while partition 0's
# members keep running from the cluster file they started with, which names none of the new
# identities. Afterwards whichever member leads partition 1 is one partition 0's file never
# knew, so a write to a queue there is acknowledged only if partition 0 trusts the keys the
# replacements vouched for (SetMemberKey through `keyload cluster member replace`;
# docs/MEMBERSHIP.md "Who vouches for a new member's key"): no restart of partition 0. The
# same then for partition 0's three members, whose keys partition 1 checks tail answers
# with: no restart of partition 1, and a catalog change still reaches it. Then partition 0
# is told by hand to refuse the leader's key (a write is refused while it leads
# without a catalog lease) and to trust it again. Every acknowledged message is read back. Ports 30000-30799 (below the ephemeral range); every
# process it starts is stopped on exit by pid, never by name.
#
#   bash tests/cluster/replace_trust.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
t_start=$(date +%s)
name="trusttest$$"
base=$(( 30000 + ($$ % 50) * 8 ))   # clients base..+6, peers base+400..+406 (30000-30799)
mkdir -p var
cfg=$(mktemp "$PWD/var/trust-XXXXXX.json")
var="var/$name"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
. tests/support/stop_dir.sh

cleanup() {
  stop_dir "$var"
  rm -rf "$var" "$cfg"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
finish() {
  echo "replace_trust.sh: $passed passed, $failed failed in $(( $(date +%s) - t_start )) s"
  [ "$failed" -eq 0 ]
  exit $?
}

# Partitions 0 and 1 of local-rf3.json: 3 members each, replica_count 3.
jq --arg name "$name" --argjson base "$base" '
  .cluster = $name
  | .partitions = [.partitions[0], .partitions[1]]
  | del(.partitions[].members[].metrics)
  | .partitions |= (to_entries | map(.key as $pi | .value
      | .members |= (to_entries | map(.key as $mi | .value
          | .client = "tcp://127.0.0.1:\($base + $pi * 4 + $mi)"
          | .peer = "tcp://127.0.0.1:\($base + 400 + $pi * 4 + $mi)"))))' deploy/local-rf3.json >"$cfg"
kc() { timeout 200 deploy/keyload-cluster --config "$cfg" "$@"; }
if ! out=$(kc up 2>&1); then bad "cluster up"; echo "$out" | tail -5; finish; fi
ok "cluster up"
key="$var/root.key"
check "admin bootstrap" timeout 60 ./bin/keyload --cluster "$var/cluster.json" admin bootstrap --tenant tr \
  --database db --admin root --key-out "$key" --cluster-secret "$var/cluster.secret" >/dev/null
k() { timeout 60 ./bin/keyload --cluster "$var/cluster.json" --database tr/db --principal root --key "$key" "$@"; }
check "queue on partition 1" k queue create jobs --partition 1 >/dev/null
p0_pids=$(cat "$var"/p0m*.pid | sort | tr '\n' ' ')

# w-<i>: one enqueue under one command id, retried (a replacement at 3-of-3 stops writes).
write() {
  local cid end
  cid=$(cat /proc/sys/kernel/random/uuid)
  end=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    k --timeout 2000 enqueue jobs --command-id "$cid" "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
check "a write before any replacement" write w-0

for node in p1m1 p1m2 p1m3; do
  out=$(KEYLOAD_DATABASE=tr/db KEYLOAD_PRINCIPAL=root KEYLOAD_KEY="$key" kc replace "$node" 2>&1); rc=$?
  echo "$out" | sed 's/^/  | /'
  check "replace $node succeeds" [ "$rc" = 0 ]
  check "a write after replacing $node" write "w-$node"
done

m=$(k --json cluster members --partition 1)
check "Members of partition 1: voters {4,5,6} (no member the cluster file of partition 0 names)" \
  [ "$(jq -c '[(.voters | sort), .committed, .joint]' <<<"$m")" = '[[4,5,6],true,false]' ]
check "partition 0 was not restarted by them (same pids)" [ "$(cat "$var"/p0m*.pid | sort | tr '\n' ' ')" = "$p0_pids" ]
echo "# partition 1's leader: member $(jq -r '.leader' <<<"$m")"
for i in 1 2 3 4 5; do check "write n-$i with only new identities in partition 1" write "n-$i"; done

# Then partition 0's members, live, one at a time: partition 1's members, which started
# from files naming none of them, check partition 0's tail answers with the keys their
# catalog copies hold (the launcher registers each before it stops the old member).
p1_pids=$(cat "$var"/p1m*.pid | sort | tr '\n' ' ')
for node in p0m1 p0m2 p0m3; do
  out=$(KEYLOAD_DATABASE=tr/db KEYLOAD_PRINCIPAL=root KEYLOAD_KEY="$key" kc replace "$node" 2>&1); rc=$?
  echo "$out" | sed 's/^/  | /'
  check "replace $node succeeds" [ "$rc" = 0 ]
  check "a write to partition 1 after replacing $node" write "w-$node"
done
m0=$(k --json cluster members --partition 0)
check "Members of partition 0: voters {4,5,6}" [ "$(jq -c '[(.voters | sort), .committed, .joint]' <<<"$m0")" = '[[4,5,6],true,false]' ]
check "partition 1 was not restarted by them (same pids)" [ "$(cat "$var"/p1m*.pid | sort | tr '\n' ' ')" = "$p1_pids" ]
echo "# partition 0's leader: member $(jq -r '.leader' <<<"$m0")"
check "a catalog change (queue create on partition 1) with only new identities in partition 0" \
  k queue create jobs2 --partition 1 >/dev/null
for i in 1 2 3; do check "write m-$i with only new identities in both partitions" write "m-$i"; done

# By hand (`keyload cluster member key`): partition 0 told to refuse the leader's key, the
# leader loses its catalog lease and a write is refused; its key registered again, writes
# go on.
m=$(k --json cluster members --partition 1)
lid=$(jq -r '.leader' <<<"$m")
lnode=$(grep -lx "$lid" "$var"/p1m*.id 2>/dev/null | head -1)
lnode=$(basename "${lnode:-none.id}" .id)
check "the leader (member $lid) is node $lnode, a replacement" [ -s "$var/$lnode.pub" ]
hex=$(base64 -d <"$var/$lnode.pub" 2>/dev/null | od -An -v -tx1 | tr -d ' \n')
check "member key --remove of the leader" k cluster member key --partition 1 --id "$lid" --remove >/dev/null
sleep 4
refused() {
  local out
  out=$(k --json --timeout 3000 enqueue jobs refused 2>&1) && return 1
  echo "# the write meanwhile: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
  grep -q catalog_lease <<<"$out"
}
check "a write is refused (catalog_lease) while partition 0 refuses the leader's key" refused
check "member key --public-key: the leader's key registered again" \
  k cluster member key --partition 1 --id "$lid" --public-key "$hex" >/dev/null
check "write n-6 once partition 0 trusts the leader again" write n-6

got=$(k --json receive jobs --max 100 --lease-ms 600000 2>/dev/null | jq -r '.results[0].messages[].body_utf8' 2>/dev/null)
want="m-1 m-2 m-3 n-1 n-2 n-3 n-4 n-5 n-6 w-0 w-p0m1 w-p0m2 w-p0m3 w-p1m1 w-p1m2 w-p1m3"
check "every acknowledged message is there once" [ "$(sort <<<"$got" | tr '\n' ' ')" = "$want " ]
check "down" kc down >/dev/null
finish
