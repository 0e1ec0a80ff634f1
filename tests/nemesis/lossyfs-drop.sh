#!/usr/bin/env bash
# Cuts the power of a lossyfs mount: lossyfs-drop.sh MOUNT. run.sh keeps lossyfs's pid in
# MOUNT.pid and its state file in MOUNT.state (lossyfs.c: "power_losses=N ..."). Sends
# SIGUSR1 and waits (at most 10 s) until the state file counts one more power loss; exit 1
# if it does not. The member on the mount must already be dead (kill -9).
set -u
mnt=$1
pid=$(cat "$mnt.pid" 2>/dev/null) || exit 1
count() { sed -n 's/^power_losses=\([0-9]*\).*/\1/p' "$mnt.state" 2>/dev/null; }
before=$(count)
[ -n "$before" ] || exit 1
kill -USR1 "$pid" || exit 1
for _ in $(seq 1 100); do
  now=$(count)
  [ -n "$now" ] && [ "$now" -gt "$before" ] && { sed 's/^/    lossyfs: /' "$mnt.state"; exit 0; }
  sleep 0.1
done
exit 1
