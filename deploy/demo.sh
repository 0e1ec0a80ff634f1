#!/usr/bin/env bash
# make run: starts the local cluster with deploy/keyload-cluster (cluster file: $KEYLOAD_CLUSTER,
# default deploy/local-rf3.json, three partitions of three members), bootstraps the first
# administrator (once; its key stays in var/<cluster>/admin.key), and walks through a
# queue's life as that administrator: create a queue and let partition 0 place it, let a
# second principal publish to it under a grant, receive, ack, stats, delete.
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

q="demo-$(date +%s)"
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
cat <<TXT

Done. The cluster keeps running with its data under var/; try:
  KEYLOAD_CLUSTER=$var/cluster.json KEYLOAD_PRINCIPAL=admin KEYLOAD_KEY=$var/admin.key ./bin/keyload principal show web
  ./bin/keyload --help
  deploy/keyload-cluster --config $cfg status
  deploy/keyload-cluster --config $cfg down
TXT
