#!/usr/bin/env bash
# Backup and restore cost (README "Backup and restore"): an RF3 cluster (3 partitions x 3
# members) is filled with STATE_MIB MiB (default 1024) of 64 KiB messages in one queue on
# partition 1 (keyload-bench through the SDK, as an administrator), then `keyload admin
# backup` is timed (wall, and its own ms/cut_ms), its size taken, the original stopped and
# `deploy/keyload-cluster restore` timed (check + 9 installs + starts), and the restored
# queue's message count compared. Prints one "backup-bench:" line. Own cluster name and
# ports 29500-29599 (below the ephemeral range); every process is stopped on exit by pid file, never by name.
#   STATE_MIB=200 bash tests/bench/backup.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
state_mib=${STATE_MIB:-1024}
name="bkbench$$" rname="bkbenchr$$"
mkdir -p var
work=$(mktemp -d "$PWD/var/bkbench-XXXXXX")
cfg="$work/orig.json" rcfg="$work/restored.json"
var="var/$name" rvar="var/$rname"
. tests/support/stop_dir.sh
cleanup() { stop_dir "$var" 200; stop_dir "$rvar" 200; rm -rf "$var" "$rvar" "$work"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
die() { echo "backup-bench: $*" >&2; exit 1; }

mkcfg() { # name port-base out
  jq --arg name "$1" --argjson base "$2" '
    .cluster = $name
    | del(.partitions[].members[].metrics)
    | .timers.election_ms = 3000
    | .partitions |= (to_entries | map(.key as $pi | .value
        | .members |= (to_entries | map(.key as $mi | .value
            | .client = "tcp://127.0.0.1:\($base + $pi * 3 + $mi)"
            | .peer = "tcp://127.0.0.1:\($base + 9 + $pi * 3 + $mi)"))))' deploy/local-rf3.json >"$3"
}
mkcfg "$name" 29500 "$cfg"
mkcfg "$rname" 29550 "$rcfg"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

timeout 120 deploy/keyload-cluster --config "$cfg" up >/dev/null || die "cluster up failed"
key="$work/root.key"
timeout 60 ./bin/keyload --cluster "$var/cluster.json" admin bootstrap --tenant bk --database db --admin root \
  --key-out "$key" --cluster-secret "$var/cluster.secret" >/dev/null || die "bootstrap failed"
k() { timeout 1200 ./bin/keyload --cluster "$1/cluster.json" --database bk/db --principal root --key "$key" "${@:2}"; }
k "$var" queue create big --partition 1 --max-bytes $(( 8 << 30 )) --max-messages 100000000 >/dev/null || die "queue create failed"
k "$var" principal grant root QueuePublish --queue big >/dev/null || die "grant failed"
batches=$(( state_mib * 1024 / 512 ))   # 8 x 64 KiB per batch
t0=$(now_ms)
fill=$(timeout 3600 ./bin/keyload-bench --cluster "$var/cluster.json" --principal root --key "$key" --database bk/db \
  --queue big --clients 4 --batch-size 8 --body-size 65536 --ops "$batches" --timeout-ms 60000 2>&1) || die "fill failed: $fill"
fill_ms=$(( $(now_ms) - t0 ))
msgs=$(k "$var" --json queue stats big | jq -r '.messages')
member_bytes=$(du -sb "$var/p1m1" | cut -f1)

t0=$(now_ms)
out=$(k "$var" --json admin backup --out "$work/bk" --hold-ms 120000 2>&1) || die "backup failed: $out"
backup_wall=$(( $(now_ms) - t0 ))
backup_bytes=$(du -sb "$work/bk" | cut -f1)
timeout 120 deploy/keyload-cluster --config "$cfg" down >/dev/null 2>&1
mkdir -p "$rvar" && chmod 700 "$rvar" && cp "$var/cluster.secret" "$rvar/cluster.secret"
t0=$(now_ms)
rout=$(timeout 3600 deploy/keyload-cluster --config "$rcfg" restore --in "$work/bk" 2>&1) || die "restore failed: $(tail -3 <<<"$rout")"
restore_wall=$(( $(now_ms) - t0 ))
rmsgs=""
for _ in $(seq 1 120); do
  rmsgs=$(k "$rvar" --json queue stats big 2>/dev/null | jq -r '.messages' 2>/dev/null)
  [ -n "$rmsgs" ] && [ "$rmsgs" != null ] && break
  sleep 0.5
done
echo "backup-bench: state_mib=$state_mib messages=$msgs fill_ms=$fill_ms member_store_bytes=$member_bytes" \
  "backup_wall_ms=$backup_wall backup=$(jq -c . <<<"$out") backup_dir_bytes=$backup_bytes" \
  "restore_wall_ms=$restore_wall restored_messages=$rmsgs load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
[ "$rmsgs" = "$msgs" ] || die "restored $rmsgs messages, the original had $msgs"
