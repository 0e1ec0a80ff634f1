#!/usr/bin/env bash
# lossyfs (tests/nemesis/lossyfs.c) on a real FUSE mount: (1) data written without fsync is
# gone after a power loss (new file, overwrite, truncate, append); (2) data fsynced or
# fdatasynced, and metadata (rename, mkdir), is kept; (3) a one-member keyloadd cluster whose
# store is on the mount keeps every acknowledged enqueue across kill -9 + power loss +
# restart, three rounds, each killed in the middle of a stream of enqueues (an enqueue cut
# off by the kill may or may not be there; nothing else may appear); and, as a control that
# this check can fail, a fourth round on a disk that lies about fsync loses acknowledged
# enqueues and is seen to. Needs root and
# /dev/fuse; prints timings. Ports: two free ones in 14000-14499 picked from the pid.
# Processes are tracked by pid and stopped on every exit; the mount is unmounted and the
# temporary directory removed.
#   bash tests/nemesis/lossyfs_test.sh      (after make all build/lossyfs)
# LOSSYFS_N: enqueues per round (default 40).
set -u
cd "$(dirname "$0")/../.."
root=$PWD
N=${LOSSYFS_N:-40}
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lossyfs-test-XXXXXX")
back="$tmp/backing" mnt="$tmp/mnt" state="$tmp/state"
mkdir -p "$back" "$mnt"
fs_pid= d_pid= w_pid=
cleanup() {
  [ -n "$w_pid" ] && kill -KILL "$w_pid" 2>/dev/null
  [ -n "$d_pid" ] && kill -KILL "$d_pid" 2>/dev/null && wait "$d_pid" 2>/dev/null
  if mountpoint -q "$mnt"; then
    fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null
  fi
  if [ -n "$fs_pid" ]; then
    for _ in $(seq 1 30); do kill -0 "$fs_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$fs_pid" 2>/dev/null
    wait "$fs_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' TERM INT
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

[ "$(id -u)" -eq 0 ] || { bad "lossyfs needs root (FUSE mount with default_permissions)"; finish; }
[ -c /dev/fuse ] || { bad "no /dev/fuse"; finish; }
[ -x build/lossyfs ] && [ -x bin/keyloadd ] && [ -x bin/keyload ] ||
  { bad "build first: make all build/lossyfs"; finish; }

# power_losses=N from the state file (empty: not mounted yet).
losses() { sed -n 's/^power_losses=\([0-9]*\).*/\1/p' "$state" 2>/dev/null || true; }
# Power loss: SIGUSR1, then wait (at most 10 s) for the count to grow. Prints the state line.
power_loss() {
  local before t0; before=$(losses); t0=$(ms)
  kill -USR1 "$fs_pid"
  for _ in $(seq 1 200); do [ "$(losses)" = $((before + 1)) ] && break; sleep 0.05; done
  [ "$(losses)" = $((before + 1)) ] || { bad "power loss $((before + 1)) not reported within 10 s"; return 1; }
  echo "     power loss $((before + 1)) took $(( $(ms) - t0 )) ms: $(cat "$state")"
  local files; files=$(sed -n 's/.* files=\([0-9]*\).*/\1/p' "$state")
  [ "${files:-0}" -gt 0 ] && grep "power loss: " "$tmp/lossyfs.err" | tail -n "$files" | sed "s|$mnt/||; s/^/       /"
  return 0
}

t0=$(ms)
build/lossyfs --state "$state" "$back" "$mnt" 2>"$tmp/lossyfs.err" &
fs_pid=$!
for _ in $(seq 1 100); do [ "$(losses)" = 0 ] && mountpoint -q "$mnt" && break; sleep 0.05; done
[ "$(losses)" = 0 ] && mountpoint -q "$mnt" || { bad "lossyfs did not mount within 5 s: $(cat "$tmp/lossyfs.err")"; finish; }
ok "mounted in $(( $(ms) - t0 )) ms"

echo "--- (1) unsynced data is lost, (2) synced data and metadata are kept"
synced() { dd of="$1" conv="${2:-fsync}" status=none; }        # stdin -> file, then fsync
printf 'synced-A' | synced "$mnt/keep"
printf 'synced-B' | synced "$mnt/keepdata" fdatasync
printf 'AAAAAAAAAA' | synced "$mnt/over"
printf '0123456789' | synced "$mnt/trunc"
printf 'base' | synced "$mnt/append"
mkdir "$mnt/dir"
printf 'renamed' | synced "$mnt/dir/tmp" && mv "$mnt/dir/tmp" "$mnt/dir/final"
printf 'never synced' >"$mnt/new"
printf 'BB' | dd of="$mnt/over" bs=1 seek=3 conv=notrunc status=none
truncate -s 2 "$mnt/trunc"
printf '+tail' >>"$mnt/append"
[ "$(cat "$mnt/new")" = "never synced" ] && [ "$(cat "$mnt/over")" = AAABBAAAAA ] &&
  [ "$(cat "$mnt/trunc")" = 01 ] && [ "$(cat "$mnt/append")" = base+tail ] &&
  ok "before the power loss, reads see every write" || bad "reads before the power loss"
power_loss || finish
[ -e "$mnt/new" ] && [ "$(stat -c %s "$mnt/new")" = 0 ] &&
  ok "(1) a new file written without fsync is empty (its creation is kept)" ||
  bad "(1) new file: $(stat -c %s "$mnt/new" 2>&1)"
[ "$(cat "$mnt/over")" = AAAAAAAAAA ] && ok "(1) an unsynced overwrite is undone" ||
  bad "(1) overwrite: $(cat "$mnt/over")"
[ "$(cat "$mnt/trunc")" = 0123456789 ] && ok "(1) an unsynced truncate is undone" ||
  bad "(1) truncate: $(cat "$mnt/trunc")"
[ "$(cat "$mnt/append")" = base ] && ok "(1) an unsynced append is cut at the synced size" ||
  bad "(1) append: $(cat "$mnt/append")"
[ "$(cat "$mnt/keep")" = synced-A ] && [ "$(cat "$mnt/keepdata")" = synced-B ] &&
  ok "(2) fsync'd and fdatasync'd data is kept" || bad "(2) synced data lost"
[ "$(cat "$mnt/dir/final" 2>/dev/null)" = renamed ] && [ ! -e "$mnt/dir/tmp" ] &&
  ok "(2) mkdir and rename after fsync are kept" || bad "(2) rename"
[ "$(cat "$back/over")" = AAAAAAAAAA ] && [ "$(cat "$back/keep")" = synced-A ] &&
  ok "the backing directory holds the same" || bad "backing directory differs"
printf 'x' | synced "$mnt/over" && power_loss >/dev/null && [ "$(cat "$mnt/over")" = x ] &&
  ok "(2) after a sync a second power loss keeps the new contents" || bad "(2) second sync: $(cat "$mnt/over")"

echo "--- (3) keyloadd on the mount: kill -9 + power loss + restart keeps every acknowledged enqueue"
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=
for i in $(seq 0 249); do
  p=$(( 14000 + (($$ + i) % 250) * 2 ))
  listening "$p" || listening $((p + 1)) || { port=$p; break; }
done
[ -n "$port" ] || { bad "no two free ports in 14000-14499"; finish; }
cfg="$tmp/cluster.json"
cat >"$cfg" <<JSON
{"cluster":"lossyfs$$","replica_count":1,"insecure_local_admin":true,
 "partitions":[{"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$port","peer":"tcp://127.0.0.1:$((port + 1))"}]}]}
JSON
bin/keyloadd keygen --cluster-secret-out "$tmp/cluster.secret" >/dev/null || { bad "keygen"; finish; }
kl() { timeout -k 2 20 bin/keyload --cluster "$cfg" "$@"; }
first=--init-store
bin/keyloadd --help 2>&1 | grep -q -- "--init-store" || first=
start_member() { # [FLAG]: starts keyloadd on the mount, waits (15 s) until it serves
  local t0; t0=$(ms)
  bin/keyloadd --cluster "$cfg" --node p0m1 --data "$mnt/p0m1" --var "$tmp/var" \
    --cluster-secret "$tmp/cluster.secret" ${1:-} >>"$tmp/p0m1.log" 2>&1 &
  d_pid=$!
  for _ in $(seq 1 150); do
    kl --json cluster-status 2>/dev/null | grep -q '"serving":true' && break
    kill -0 "$d_pid" 2>/dev/null || break
    sleep 0.1
  done
  kl --json cluster-status 2>/dev/null | grep -q '"serving":true' ||
    { bad "keyloadd did not serve within 15 s: $(tail -3 "$tmp/p0m1.log")"; return 1; }
  echo "     keyloadd serving $(( $(ms) - t0 )) ms after start"
}
start_member "$first" || finish
kl database create >/dev/null || { bad "database create"; finish; }

# One writer: enqueues BODY-1..BODY-N in order until one fails; records each acked body.
writer() { # queue prefix
  local i
  for i in $(seq 1 "$N"); do
    echo "$2-$i" >>"$tmp/tried"
    kl enqueue "$1" "$2-$i" >/dev/null 2>&1 || return 0
    echo "$2-$i" >>"$tmp/acked"
  done
}
for round in 1 2 3; do
  q="jobs$round"
  kl queue create "$q" >/dev/null || { bad "round $round: queue create"; break; }
  : >"$tmp/tried"; : >"$tmp/acked"
  t0=$(ms)
  writer "$q" "r$round" & w_pid=$!
  # kill -9 in the middle of the stream: after half of the enqueues were acknowledged (90 s)
  for _ in $(seq 1 1800); do [ "$(wc -l <"$tmp/acked")" -ge $((N / 2)) ] && break; sleep 0.05; done
  kill -KILL "$d_pid"; wait "$d_pid" 2>/dev/null; d_pid=
  wait "$w_pid"; w_pid=
  acked=$(wc -l <"$tmp/acked") tried=$(wc -l <"$tmp/tried")
  echo "     round $round: $acked enqueues acknowledged in $(( $(ms) - t0 )) ms before kill -9 ($tried tried)"
  [ "$acked" -ge $((N / 2)) ] || bad "round $round: only $acked of $N acknowledged before the kill"
  power_loss || break
  start_member || break
  kl --json receive "$q" --max $((N + 10)) --lease-ms 600000 >"$tmp/recv" 2>&1 ||
    { bad "round $round: receive: $(cat "$tmp/recv")"; break; }
  jq -r '.results[0].messages[].body_utf8' "$tmp/recv" | sort >"$tmp/got"
  missing=$(sort "$tmp/acked" | comm -23 - "$tmp/got" | wc -l)
  phantom=$(sort "$tmp/tried" | comm -13 - "$tmp/got" | wc -l)
  dups=$(uniq -d "$tmp/got" | wc -l)
  [ "$missing" -eq 0 ] && [ "$phantom" -eq 0 ] && [ "$dups" -eq 0 ] &&
    ok "round $round: all $acked acknowledged enqueues are there once ($(wc -l <"$tmp/got") present, $tried tried)" ||
    bad "round $round: missing $missing, phantom $phantom, duplicated $dups"
done
echo "--- control: with fsync lying (SIGUSR2), the same check sees acknowledged enqueues lost"
lies() { # WANT: toggles the mode and waits for the state line to show it
  kill -USR2 "$fs_pid"
  for _ in $(seq 1 100); do grep -q "fsync_lies=$1" "$state" && return 0; sleep 0.05; done
  bad "fsync_lies=$1 not reported"; return 1
}
if [ -n "$d_pid" ] && kl queue create control >/dev/null; then
  : >"$tmp/tried"; : >"$tmp/acked"
  N=$((N / 2)) writer control honest; honest=$(wc -l <"$tmp/acked")
  lies 1 && N=$((N / 2)) writer control lied
  kill -KILL "$d_pid"; wait "$d_pid" 2>/dev/null; d_pid=
  power_loss && lies 0 && start_member &&
    kl --json receive control --max $((N + 10)) --lease-ms 600000 >"$tmp/recv" 2>&1
  jq -r '.results[0].messages[].body_utf8' "$tmp/recv" 2>/dev/null | sort >"$tmp/got"
  lost_honest=$(grep '^honest-' "$tmp/acked" | sort | comm -23 - "$tmp/got" | wc -l)
  lost_lied=$(grep '^lied-' "$tmp/acked" | sort | comm -23 - "$tmp/got" | wc -l)
  [ "$honest" -gt 0 ] && [ "$lost_honest" -eq 0 ] && [ "$lost_lied" -gt 0 ] &&
    ok "control: $lost_lied of $(grep -c '^lied-' "$tmp/acked") enqueues acknowledged over lying fsyncs are lost and detected, none of $honest before" ||
    bad "control: lost $lost_honest honest, $lost_lied lied ($(head -c 300 "$tmp/recv"))"
else
  bad "control: no member or queue create failed"
fi
finish
