#!/usr/bin/env bash
# tests/nemesis/run.sh SECONDS [SEED] [--schedule test|soak]: the nemesis harness's plumbing.
# Builds a private network (one hub namespace with a bridge; every cluster member in its own
# namespace with one veth into the hub; addresses from 198.18.0.0/24, the RFC 2544
# benchmarking range, only on those links), one loop-mounted ext4 image for the member whose
# disk fills, then runs build/nemesis inside the hub namespace (it starts the members, the
# coordinator and the workload, injects the faults and checks the history). Everything is
# named after this shell's pid and removed on exit, on failure and on a signal: only what this
# run created. Must run as root.
set -u
cd "$(dirname "$0")/../.."
root=$PWD
secs=${1:?SECONDS}
seed=${2:-$(( ($(date +%s%N) / 1000) % 2147483647 ))}
schedule=${3:-soak}
[ "$(id -u)" -eq 0 ] || { echo "nemesis: must run as root (network namespaces, nftables, loop devices)" >&2; exit 2; }
for tool in ip nft losetup mkfs.ext4; do
  command -v "$tool" >/dev/null || { echo "nemesis: $tool is missing; run make deps" >&2; exit 2; }
done

# The checks first, on made-up histories: a check that cannot fail stops the run here.
"$root/build/nemesis" --self-test || { echo "0 passed, 1 failed"; exit 1; }

tag=$$
hub="klnh$tag"
work="$root/build/nemesis-$tag"
img="$work/disk.img"
mnt="$work/disk"
loopdev=""
drv_pid=""
nodes=()
for p in 0 1 2; do for m in 1 2 3; do nodes+=("p${p}m${m}"); done; done
# The data partitions' spare slots (198.18.0.19, .20): a replaced member's new identity
# starts there (tests/nemesis/members.c).
nodes+=(p1m4 p2m4)
# The member whose store lives on the small image (a data partition follower at start).
disk_node=p2m3
# The member whose store lives on lossyfs (power loss: unsynced writes dropped).
lossy_node=p1m3
lossy_back="$work/lossy-backing"
lossy_mnt="$work/lossy"
lossy_pid=""

cleanup() {
  trap - EXIT INT TERM
  if [ -n "$drv_pid" ] && kill -0 "$drv_pid" 2>/dev/null; then
    kill -TERM "$drv_pid" 2>/dev/null; sleep 2; kill -KILL "$drv_pid" 2>/dev/null
  fi
  [ -n "$drv_pid" ] && wait "$drv_pid" 2>/dev/null
  # Not a bare wait: lossyfs runs until its mount goes, which is what comes next.
  if mountpoint -q "$lossy_mnt" 2>/dev/null; then
    fusermount3 -u "$lossy_mnt" 2>/dev/null || fusermount3 -uz "$lossy_mnt" 2>/dev/null
  fi
  if [ -n "$lossy_pid" ]; then
    kill -KILL "$lossy_pid" 2>/dev/null
    wait "$lossy_pid" 2>/dev/null
  fi
  if mountpoint -q "$mnt" 2>/dev/null; then umount -l "$mnt" 2>/dev/null; fi
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null
  rm -f "$img"
  for n in "${nodes[@]}"; do ip netns del "kln$tag-$n" 2>/dev/null; done
  ip netns del "$hub" 2>/dev/null
  echo "nemesis: removed namespaces $hub, kln$tag-*, the disk image and its loop device"
  # Stores and logs stay for a failed run (they explain it) and go after a passed one.
  if [ "${rc:-1}" -eq 0 ]; then rm -rf "$work"; else echo "nemesis: logs and stores kept in $work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work"
ip netns add "$hub" || exit 1
ip -n "$hub" link set lo up
ip -n "$hub" link add "br$tag" type bridge
ip -n "$hub" addr add 198.18.0.1/24 dev "br$tag"
ip -n "$hub" link set "br$tag" up
k=0
for n in "${nodes[@]}"; do
  ns="kln$tag-$n"
  ip netns add "$ns" || exit 1
  ip -n "$ns" link set lo up
  # Both ends are created in the hub: the member end is then moved into its namespace, so
  # no veth ever appears among the host's interfaces.
  ip -n "$hub" link add "kh$tag$n" type veth peer name "km$tag$n" || exit 1
  ip -n "$hub" link set "km$tag$n" netns "$ns"
  ip -n "$ns" link set "km$tag$n" name eth0
  ip -n "$ns" addr add "198.18.0.$((10 + k))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$hub" link set "kh$tag$n" master "br$tag"
  ip -n "$hub" link set "kh$tag$n" up
  k=$((k + 1))
done
echo "nemesis: hub $hub (bridge br$tag, 198.18.0.1), members kln$tag-pPmM at 198.18.0.10-18, spare slots p1m4, p2m4 at .19, .20"

# A 64 MiB ext4 image for $disk_node's store: small enough that the harness fills it in a
# moment, large enough for the member's RocksDB at rest.
truncate -s 64M "$img" && mkfs.ext4 -q -F "$img" || exit 1
loopdev=$(losetup --find --show "$img") || exit 1
mkdir -p "$mnt" && mount "$loopdev" "$mnt" || exit 1
echo "nemesis: $disk_node's store on $loopdev (ext4, 64 MiB) at $mnt"

lossy_args=()
if [ -x "$root/build/lossyfs" ] && command -v fusermount3 >/dev/null; then
  mkdir -p "$lossy_back" "$lossy_mnt"
  "$root/build/lossyfs" --state "$lossy_mnt.state" "$lossy_back" "$lossy_mnt" 2>"$work/lossyfs.log" &
  lossy_pid=$!
  echo "$lossy_pid" >"$lossy_mnt.pid"
  for _ in $(seq 1 50); do
    grep -q '^power_losses=' "$lossy_mnt.state" 2>/dev/null && mountpoint -q "$lossy_mnt" && break
    sleep 0.1
  done
  if mountpoint -q "$lossy_mnt"; then
    echo "nemesis: $lossy_node's store on lossyfs (pid $lossy_pid) at $lossy_mnt"
    lossy_args=(--lossy-node "$lossy_node" --lossy-dir "$lossy_mnt")
  else
    echo "nemesis: lossyfs did not mount: $(tail -2 "$work/lossyfs.log")"; exit 1
  fi
else
  echo "nemesis: build/lossyfs or fusermount3 missing: power loss cannot run"; exit 1
fi

ip netns exec "$hub" "$root/build/nemesis" --root "$root" --work "$work" --tag "$tag" \
  --seconds "$secs" --seed "$seed" --schedule "$schedule" --disk-node "$disk_node" --disk-dir "$mnt" "${lossy_args[@]}" &
drv_pid=$!
rc=1
wait "$drv_pid"
rc=$?
drv_pid=""
exit $rc
