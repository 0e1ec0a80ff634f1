#!/usr/bin/env bash
# make run: starts the local cluster (deploy/local-1.json: one durable keyloadd) and walks
# through a queue's life: create, enqueue, receive, ack, stats. The cluster stays up;
# stop it with `deploy/keyload-cluster down`.
set -euo pipefail
cd "$(dirname "$0")/.."
export KEYLOAD_CLUSTER=deploy/local-1.json
kl=./bin/keyload
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step deploy/keyload-cluster up
q="demo-$(date +%s)"
step $kl queue create "$q" --partition 0 --max-messages 1000
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

Done. The daemon keeps running with its data under var/; try:
  KEYLOAD_CLUSTER=deploy/local-1.json ./bin/keyload --help
  deploy/keyload-cluster status
  deploy/keyload-cluster down
TXT
