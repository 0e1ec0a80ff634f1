#!/usr/bin/env bash
# make run: starts the local cluster with deploy/keyload-cluster (cluster file: $KEYLOAD_CLUSTER,
# default deploy/local-rf3.json, three partitions of three members) and walks through a
# queue's life: create the database (partition 0's catalog; already there on a second run),
# create a queue and let partition 0 place it, enqueue, receive, ack, stats, delete.
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

# The database must exist before any queue: create it, or find it there (CONFLICT) from an
# earlier run. Anything else is a real failure and stops the demo.
show "$kl --json database create $db"
rc=0
out=$($kl --json database create "$db") || rc=$?
if [ "$rc" -eq 0 ]; then
  jq -r --arg db "$db" '"created database \($db): database id \(.results[0].database_id), catalog version \(.results[0].catalog_version) (command \(.command_id), index \(.index))"' <<<"$out"
elif [ "$rc" -eq 1 ] && [ "$(jq -r '.error.code // empty' <<<"$out" 2>/dev/null)" = CONFLICT ]; then
  echo "database $db exists already (CONFLICT: $(jq -r '.error.message' <<<"$out")); using it"
else
  echo "demo: database create failed (exit $rc): $out" >&2
  exit 1
fi

q="demo-$(date +%s)"
# No --partition: partition 0 picks a data partition and the CLI prints which.
step $kl queue create "$q" --max-messages 1000
step $kl enqueue "$q" --header source=demo --field n:int=1 "hello, KeyLoad"
step $kl enqueue "$q" --header source=demo --field n:int=2 "second message"
step $kl queue stats "$q"
out=$($kl --json receive "$q" --max 2 --lease-ms 30000)
printf '\n\033[1m$ %s\033[0m\n%s\n' "keyload --json receive $q --max 2 --lease-ms 30000" "$out"
mapfile -t leases < <(jq -r '.. | objects | select(has("lease_token")) | .lease_token' <<<"$out")
step $kl ack "$q" "${leases[@]}"
step $kl queue stats "$q"
step $kl queue delete "$q"
cat <<TXT

Done. The cluster keeps running with its data under var/; try:
  KEYLOAD_CLUSTER=$cfg ./bin/keyload --help
  deploy/keyload-cluster --config $cfg status
  deploy/keyload-cluster --config $cfg down
TXT
