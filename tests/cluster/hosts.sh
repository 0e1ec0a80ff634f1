#!/usr/bin/env bash
# Three hosts, as README "Deploying on several hosts" lays them out, in network namespaces:
# hosts a, b, c each have their own address, their own `make install` (prefix, /etc/keyload,
# /var/lib/keyload under a temporary root), member keys made on that host, the one cluster
# secret copied to it and the same cluster file. Each runs one member of each of three RF3
# partitions, started from its installed keyloadd@.service's ExecStart line inside its
# namespace; the coordinator runs on host a from its installed unit. From a fourth namespace,
# the operator's: `cluster-status --wait-ready` for every member, bootstrap, queues on two
# partitions, enqueue/receive/ack with the CLI, a transfer the coordinator delivers, the MCP
# server's tools, and a member of host b restarted and awaited. Namespaces, links (a bridge
# in a hub namespace, one veth per namespace, 198.18.1.0/24 only on those links) and the
# temporary root are this run's and removed on exit; processes are stopped by pid. Root only.
set -u
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
. tests/support/stop_dir.sh  # gone PID, proc_id PID, ended ID
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "hosts: needs root and ip (network namespaces)"; echo "0 passed, 1 failed"; exit 1
fi

tag=$$
hub="klhh$tag"
hosts=(a b c)
declare -A ns=([a]="klh$tag-a" [b]="klh$tag-b" [c]="klh$tag-c" [op]="klh$tag-op")
declare -A addr=([a]=198.18.1.10 [b]=198.18.1.11 [c]=198.18.1.12 [op]=198.18.1.20)
declare -A pid=()
tmp=$(mktemp -d /tmp/kl-hosts-XXXXXX)
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 100); do
    local left=0
    for p in "${pid[@]}"; do gone "$p" || left=1; done
    [ $left -eq 0 ] && break
    sleep 0.05
  done
  for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for h in a b c op; do ip netns del "${ns[$h]}" 2>/dev/null; done
  ip netns del "$hub" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the network: a bridge in the hub, one veth per host (created in the hub, then moved)
ip netns add "$hub" && ip -n "$hub" link set lo up && ip -n "$hub" link add "br$tag" type bridge &&
  ip -n "$hub" link set "br$tag" up || { bad "hub namespace"; echo "$passed passed, $failed failed"; exit 1; }
for h in a b c op; do
  n=${ns[$h]}
  ip netns add "$n" && ip -n "$n" link set lo up &&
    ip -n "$hub" link add "kh$tag$h" type veth peer name "kx$tag$h" &&
    ip -n "$hub" link set "kx$tag$h" netns "$n" &&
    ip -n "$n" link set "kx$tag$h" name eth0 &&
    ip -n "$n" addr add "${addr[$h]}/24" dev eth0 && ip -n "$n" link set eth0 up &&
    ip -n "$hub" link set "kh$tag$h" master "br$tag" && ip -n "$hub" link set "kh$tag$h" up ||
    { bad "namespace for host $h"; echo "$passed passed, $failed failed"; exit 1; }
done
check "each host has its own address, on its link only" \
  bash -c '[ "$(ip -n "$0" -4 -o addr show dev eth0 | awk "{print \$4}")" = "$1/24" ]' "${ns[b]}" "${addr[b]}"

# ---- each host: its own install, its own member keys
for h in a b c; do
  make -s install PREFIX="$tmp/$h/usr" SYSCONFDIR="$tmp/$h/etc/keyload" STATEDIR="$tmp/$h/var/lib/keyload" \
    >"$tmp/install-$h.log" 2>&1 || { cat "$tmp/install-$h.log"; bad "make install on host $h"; }
  mkdir -p "$tmp/$h/etc/keyload" "$tmp/$h/var/lib/keyload"
done
hm() { case $1 in a) echo 1;; b) echo 2;; c) echo 3;; esac; }   # host -> member id
members() { # members P: the partition's member objects, keys read from each host's key file
  local p=$1 out='[]' h m pub
  for h in a b c; do
    m=$(hm $h)
    pub=$("$tmp/$h/usr/bin/keyloadd" keygen --public-of "$tmp/$h/etc/keyload/p${p}m$m.key")
    out=$(jq --argjson m "$m" --arg pub "$pub" --arg ip "${addr[$h]}" --argjson p "$p" \
      '. + [{id: $m, client: "tcp://\($ip):\(7400 + $p)", peer: "tcp://\($ip):\(7500 + $p)", public_key: $pub}]' <<<"$out")
  done
  echo "$out"
}
for h in a b c; do
  for p in 0 1 2; do "$tmp/$h/usr/bin/keyloadd" keygen --secret-out "$tmp/$h/etc/keyload/p${p}m$(hm $h).key" >/dev/null; done
done
"$tmp/a/usr/bin/keyloadd" keygen --cluster-secret-out "$tmp/a/etc/keyload/cluster.secret" >/dev/null
jq -n --argjson m0 "$(members 0)" --argjson m1 "$(members 1)" --argjson m2 "$(members 2)" \
  '{cluster: "hoststest", replica_count: 3, partitions: [{id: 0, members: $m0}, {id: 1, members: $m1}, {id: 2, members: $m2}]}' \
  >"$tmp/a/etc/keyload/cluster.json"
for h in b c; do
  cp -p "$tmp/a/etc/keyload/cluster.secret" "$tmp/a/etc/keyload/cluster.json" "$tmp/$h/etc/keyload/"
done
check "member keys stay on their host (a has no key of b's members)" test ! -e "$tmp/a/etc/keyload/p0m2.key"

# ---- start every member from its host's installed unit, inside the host's namespace
line() { sed -n "s/^$2=//p" "$tmp/$1/usr/lib/systemd/system/$3" | sed -e "s/%i/$4/g" -e 's/\$\$/$/g'; }
start_member() { # start_member HOST NODE
  ( eval "exec ip netns exec ${ns[$1]} $(line "$1" ExecStart keyloadd@.service "$2")" ) >>"$tmp/$2.log" 2>&1 &
  pid[$2]=$!
}
for h in a b c; do for p in 0 1 2; do start_member $h "p${p}m$(hm $h)"; done; done
opcfg=$tmp/op/cluster.json
mkdir -p "$tmp/op" && cp "$tmp/a/etc/keyload/cluster.json" "$opcfg"
opbin=$tmp/a/usr/bin
op() { timeout -k 5 90 ip netns exec "${ns[op]}" env -u KEYLOAD_PRINCIPAL -u KEYLOAD_KEY "$opbin/keyload" --cluster "$opcfg" "$@"; }
for h in a b c; do for p in 0 1 2; do
  node="p${p}m$(hm $h)"
  check "operator namespace: $node (host $h) ready" op cluster-status --wait-ready "$node" --wait-ms 60000
done; done
for h in a b c; do for p in 0 1 2; do
  node="p${p}m$(hm $h)"; eval "$(line $h ExecStartPost keyloadd@.service "$node")"
done; done
check "first start left each member's marker on its host" test -e "$tmp/b/var/lib/keyload/p1m2.initialized"

# ---- the operator's CLI from its own namespace
out=$(op admin bootstrap --tenant ops --database db --admin coordinator --key-out "$tmp/op/coordinator.key" \
  --cluster-secret "$tmp/a/etc/keyload/cluster.secret" 2>&1)
check "admin bootstrap over the links" test $? -eq 0
ko() { op --database ops/db --principal coordinator --key "$tmp/op/coordinator.key" "$@"; }
check "queue create xfer-src on partition 1" ko queue create xfer-src --partition 1
check "queue create xfer-dst on partition 2" ko queue create xfer-dst --partition 2
for perm in QueuePublish QueueInspect QueueConsume; do
  check "grant $perm on xfer-*" ko principal grant coordinator "$perm" --queue 'xfer-*' --fields '*' --headers '*'
done
check "grant QueueAck on xfer-*" ko principal grant coordinator QueueAck --queue 'xfer-*'
out=$(ko --json enqueue xfer-src "hello over veth"); check "enqueue" test "$(jq -r '.partition' <<<"$out")" = 1
out=$(ko --json receive xfer-src --max 1)
tok=$(jq -r '.results[0].messages[0].lease_token // empty' <<<"$out")
check "receive returns the message" test -n "$tok"
check "ack it" sh -c "printf '%s' '$tok' | timeout 60 ip netns exec ${ns[op]} '$opbin/keyload' --cluster '$opcfg' --database ops/db --principal coordinator --key '$tmp/op/coordinator.key' ack xfer-src - >/dev/null"

# ---- the coordinator on host a, from its installed unit, drives a transfer to Delivered
cp "$tmp/op/coordinator.key" "$tmp/a/etc/keyload/coordinator.key"
jq -n --arg c "$tmp/a/etc/keyload/cluster.json" --arg k "$tmp/a/etc/keyload/coordinator.key" \
  --arg s "$tmp/a/var/lib/keyload/coordinator.status.json" \
  '{cluster_file: $c, database: "ops/db", transfer_coordinator_principal_id: "coordinator",
    principal_key_file: $k, status_file: $s, flush_interval_ms: 10, workers: 8}' >"$tmp/a/etc/keyload/coordinator.json"
chmod 600 "$tmp/a/etc/keyload/coordinator.json"
check "coordinator unit: ExecStartPre --check passes" \
  bash -c "$(line a ExecStartPre keyload-coordinator.service x) >/dev/null 2>&1"
( eval "exec ip netns exec ${ns[a]} $(line a ExecStart keyload-coordinator.service x)" ) >>"$tmp/coordinator.log" 2>&1 &
pid[coordinator]=$!
xid=$(cat /proc/sys/kernel/random/uuid)
check "transfer create (partition 1 -> 2)" ko transfer create --source xfer-src --id "$xid" --dest xfer-dst "moved between hosts"
state=
for _ in $(seq 1 60); do
  state=$(ko --json transfer inspect --source xfer-src --id "$xid" 2>/dev/null | jq -r '.state')
  [ "$state" = Delivered ] && break
  sleep 0.5
done
check "the coordinator delivered it (state $state)" test "$state" = Delivered
out=$(ko --json queue stats xfer-dst); check "exactly one message at the destination" test "$(jq -r '.messages' <<<"$out")" = 1

# ---- the MCP server from the operator's namespace
mcp_out=$(printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hosts.sh","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"queue_stats","arguments":{"queue":"xfer-dst"}}}' |
  timeout 60 ip netns exec "${ns[op]}" env KEYLOAD_CLUSTER="$opcfg" KEYLOAD_DATABASE=ops/db \
    KEYLOAD_PRINCIPAL=coordinator KEYLOAD_KEY="$tmp/op/coordinator.key" "$opbin/keyload-mcp" 2>"$tmp/mcp.err")
stats=$(jq -c 'select(.id == 2) | .result' <<<"$mcp_out" 2>/dev/null)
echo "     MCP: $stats" | cut -c1-300
check "MCP queue_stats over the links answers 1 message" \
  test "$(jq -r 'select(.isError != true) | .content[0].text | fromjson | .messages' <<<"$stats" 2>/dev/null)" = 1

# ---- a rolling restart of host b's partition-1 member
p1m2_id=$(proc_id "${pid[p1m2]}")
kill -TERM "${pid[p1m2]}"
for _ in $(seq 1 200); do ended "$p1m2_id" && break; sleep 0.05; done
check "p1m2 stopped on SIGTERM" ended "$p1m2_id"
start_member b p1m2
check "p1m2 restarted without --init-store" sh -c "sleep 0.5; ! ps -o args= -p ${pid[p1m2]} | grep -q -- --init-store"
check "operator: --wait-ready p1m2 after the restart" op cluster-status --wait-ready p1m2 --wait-ms 60000
out=$(ko --json enqueue xfer-src "after the restart"); check "partition 1 takes writes at 3-of-3 again" test "$(jq -r '.partition' <<<"$out")" = 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
