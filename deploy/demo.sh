#!/usr/bin/env bash
# make run: starts the local cluster with deploy/keyload-cluster (cluster file: $KEYLOAD_CLUSTER,
# default deploy/local-rf3.json, three partitions of three members), bootstraps the first
# administrator (once; its key stays in var/<cluster>/admin.key), and walks through a
# queue's life as that administrator: create a queue and let partition 0 place it, let a
# second principal publish to it under a grant, receive, ack, stats, delete.
# Then a remote transfer driven by the coordinator: a dedicated principal
# `coordinator` (a database administrator with the data grants transfers need, created
# once, key in var/<cluster>/coordinator.key), the coordinator's config
# var/<cluster>/coordinator.json (mode 0600, written once) naming it, the coordinator started
# through the launcher (`start coordinator`; later `up`s start it by themselves because the
# config exists), two queues on partitions 1 and 2, one `transfer create` by the CLI, and the
# coordinator taking it to Delivered (polled with a bound) with the message at the destination.
# The cluster stays up; stop it with `deploy/keyload-cluster down`.
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${KEYLOAD_CLUSTER:-deploy/local-rf3.json}
export KEYLOAD_CLUSTER=$cfg
db=${KEYLOAD_DATABASE:-default/default}
export KEYLOAD_DATABASE=$db
kl=./bin/keyload
show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
step() { show "$@"; "$@"; }

step deploy/keyload-cluster --config "$cfg" up
name=$(jq -r .cluster "$cfg")
var="var/$name"
# Every request needs a session from here on: the launcher's cluster file lists the
# members' public keys, which the CLI checks each member's handshake against.
export KEYLOAD_CLUSTER="$var/cluster.json"

# The first cluster administrator: bootstrap works once per cluster, with the cluster
# secret; later runs reuse the key it wrote.
if [ ! -f "$var/admin.key" ]; then
  step $kl admin bootstrap --tenant "${db%%/*}" --database "${db#*/}" --admin admin --key-out "$var/admin.key"
else
  echo "administrator 'admin' exists already (key $var/admin.key)"
fi
export KEYLOAD_PRINCIPAL=admin KEYLOAD_KEY="$var/admin.key"

stamp=$(date +%s)
q="demo-$stamp"
# No --partition: partition 0 picks a data partition and the CLI prints which.
step $kl queue create "$q" --max-messages 1000
# A second principal that may only publish to demo queues, and only the field "n".
if [ ! -f "$var/web.key" ]; then
  step $kl principal create web --key-out "$var/web.key"
  step $kl principal grant web QueuePublish --queue 'demo-*' --fields n --headers source
fi
step $kl --principal web --key "$var/web.key" enqueue "$q" --header source=demo --field n:int=1 "hello, KeyLoad"
step $kl --principal web --key "$var/web.key" enqueue "$q" --header source=demo --field n:int=2 "second message"
show "$kl --principal web --key $var/web.key receive $q   # web may publish, not consume"
$kl --principal web --key "$var/web.key" receive "$q" || true
step $kl queue stats "$q"
out=$($kl --json receive "$q" --max 2 --lease-ms 30000)
printf '\n\033[1m$ %s\033[0m\n%s\n' "keyload --json receive $q --max 2 --lease-ms 30000" "$out"
mapfile -t leases < <(jq -r '.. | objects | select(has("lease_token")) | .lease_token' <<<"$out")
step $kl ack "$q" "${leases[@]}"
step $kl queue stats "$q"
step $kl queue delete "$q"
# ---- a remote transfer, delivered by the coordinator ----
transfer_demo() {
  if [ "$(jq '.partitions | length' "$cfg")" -lt 3 ]; then
    echo "(skipping the transfer demo: $cfg has fewer than two data partitions)"
    return 0
  fi
  local ckey="$var/coordinator.key" ccfg="$var/coordinator.json"
  local -a as_coord=(--principal coordinator --key "$ckey")
  cat <<TXT

--- Remote transfer, driven by the coordinator ---
The coordinator (bin/keyload-coordinator) drives transfers that its principal created: it
finds them pending, accepts each at the destination once, reads the signed receipt and
completes the source. It never creates credentials; it uses an existing principal, so we
make one: a database administrator whose data grants on xfer-* are what transfers need.
TXT
  if [ ! -f "$ckey" ]; then
    step $kl principal create coordinator --key-out "$ckey" --role database-admin
  else
    echo "principal 'coordinator' exists already (key $ckey)"
  fi
  # The daemon checks an administrator's data grants on transfer queues as if it were none.
  # Granting again only replaces the lists, so every run states them.
  for perm in QueuePublish QueueInspect QueueConsume; do
    step $kl principal grant coordinator "$perm" --queue 'xfer-*' --fields '*' --headers '*'
  done
  step $kl principal grant coordinator QueueAck --queue 'xfer-*'
  if [ ! -f "$ccfg" ]; then
    # Relative paths: the launcher runs the coordinator from the repository root.
    (umask 077; jq -n --arg cl "$var/cluster.json" --arg db "$db" --arg key "$ckey" \
      '{cluster_file: $cl, database: $db, transfer_coordinator_principal_id: "coordinator",
        principal_key_file: $key}' >"$ccfg.tmp")
    mv "$ccfg.tmp" "$ccfg"
    show "cat $ccfg   # written once, mode 0600; the launcher starts the coordinator when it exists"
  else
    show "cat $ccfg   # exists already; the launcher starts the coordinator when it exists"
  fi
  cat "$ccfg"
  if [ "$(jq -r '.transfer_coordinator_principal_id' "$ccfg")" != coordinator ] ||
     [ "$(jq -r '.database' "$ccfg")" != "$db" ]; then
    echo "(skipping the transfer demo: $ccfg names another principal or database; the coordinator"
    echo " only drives transfers its own principal created in its database)"
    return 0
  fi
  step deploy/keyload-cluster --config "$cfg" start coordinator

  local src="xfer-src-$stamp" dst="xfer-dst-$stamp" id
  step $kl queue create "$src" --partition 1
  step $kl queue create "$dst" --partition 2
  id=$(cat /proc/sys/kernel/random/uuid)
  # Created as the coordinator's principal: the coordinator takes only its own transfers.
  # --token-out keeps the intent token (a credential) off the terminal.
  step $kl "${as_coord[@]}" transfer create --source "$src" --id "$id" --dest "$dst" \
    --header source=demo --token-out "$var/intent-$stamp.tok" "moved by the coordinator"
  rm -f "$var/intent-$stamp.tok"   # the demo does not need it: the coordinator lists the intent
  show "$kl ${as_coord[*]} --json transfer inspect --source $src --id $id   # every 0.5 s, up to 30 s"
  local state="" t0=$SECONDS out
  while [ $((SECONDS - t0)) -lt 30 ]; do
    out=$($kl "${as_coord[@]}" --json transfer inspect --source "$src" --id "$id" 2>&1) || true
    state=$(jq -r '.state // .error.code // "?"' <<<"$out" 2>/dev/null || echo "?")
    echo "  after $((SECONDS - t0)) s: $state"
    [ "$state" = Delivered ] && break
    sleep 0.5
  done
  if [ "$state" != Delivered ]; then
    echo "The transfer is not Delivered after 30 s. The coordinator's view and log:"
    ./bin/keyload-coordinator --status --config "$ccfg" | jq '{discovery, pending, in_flight, counters, failed}' || true
    tail -n 10 "$var/coordinator.log"
    return 1
  fi
  show "$kl ${as_coord[*]} transfer inspect --source $src --id $id   # token lines left out"
  $kl "${as_coord[@]}" transfer inspect --source "$src" --id "$id" | grep -v 'token (base64)'
  step $kl "${as_coord[@]}" receive "$dst" --max 1
  show "grep 'id=$id' $var/coordinator.log   # one line per decision, never tokens or bodies"
  grep -F "id=$id" "$var/coordinator.log" | sed 's/^/  /' || true
}
transfer_demo

cat <<TXT

Done. The cluster keeps running with its data under var/; try:
  KEYLOAD_CLUSTER=$var/cluster.json KEYLOAD_PRINCIPAL=admin KEYLOAD_KEY=$var/admin.key ./bin/keyload principal show web
  ./bin/keyload --help
  deploy/keyload-cluster --config $cfg status          # members, and the coordinator's snapshot
  ./bin/keyload-coordinator --status --config $var/coordinator.json
  deploy/keyload-cluster --config $cfg down            # stops the coordinator, then the members
TXT
