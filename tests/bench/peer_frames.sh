#!/usr/bin/env bash
# peer_frames.sh: the peer frames a client-driven transfer costs, by Raft message type. Runs
# the xcoord part of run.sh (3 partitions x 3 members, one client with 32 transfers in
# flight); from 1 s into its client-driven cell, counts for WINDOW_S seconds, on all members,
# every frame the replication driver packs (a uprobe on keyload__v1__raft_message__pack in
# the keyloadd the bench runs, reading the message's type and entry count) and every log
# write (kl_store_log_write). Prints the counts, frames per log write and, at the cell's
# rate, frames per transfer. Needs root and perf; its two probes (klpf_pack, klpf_logw) are
# deleted on exit.
#   tests/bench/peer_frames.sh
#   BENCH_BIN=/path/to/other/bin tests/bench/peer_frames.sh
# Environment: BENCH_BIN (default bin), BENCH_SECONDS (the cell, default 10), WINDOW_S
#              (default 3, at most BENCH_SECONDS - 2).
# run.sh starts and stops every process by pid; this script starts run.sh and perf, and
# waits for both (run.sh at most 15 minutes).
set -u
cd "$(dirname "$0")/../.." || exit 2
secs=${BENCH_SECONDS:-10}
win=${WINDOW_S:-3}
[ "$win" -le $((secs - 2)) ] || { echo "peer_frames: WINDOW_S must be at most BENCH_SECONDS - 2"; exit 2; }
command -v perf >/dev/null || { echo "peer_frames: perf is missing"; exit 2; }
[ -f build/gen/keyload/v1/raft.pb-c.h ] || { echo "peer_frames: build/gen is missing; run make first"; exit 2; }
tmp=$(mktemp -d /tmp/kl-peer-frames-XXXXXX)
. tests/bench/xcell.sh
probed=0
cleanup() {
  [ $probed = 1 ] && perf probe -q -d probe_keyloadd:klpf_pack -d probe_keyloadd:klpf_logw 2>/dev/null
  xcell_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Where the packed message keeps its type and entry count, from the generated header.
cat >"$tmp/off.c" <<'EOF'
#include <stddef.h>
#include <stdio.h>
#include "keyload/v1/raft.pb-c.h"
int main(void)
{
    printf("%zu %zu\n", offsetof(Keyload__V1__RaftMessage, type), offsetof(Keyload__V1__RaftMessage, n_entries));
    return 0;
}
EOF
cc -Ibuild/gen -o "$tmp/off" "$tmp/off.c" || { echo "peer_frames: cannot build the offset helper"; exit 2; }
read -r off_type off_nent < <("$tmp/off")
xcell_start "$tmp/run.txt"
xcell_wait_cell || { echo "peer_frames: the transfer cell never started; run.sh said:"; tail -n 5 "$tmp/run.txt"; exit 1; }
# run.sh runs its own copy of keyloadd: probe that file.
member=$(xcell_ours keyloadd | head -n 1)
exe=$(readlink "/proc/$member/exe")
[ -n "$exe" ] || { echo "peer_frames: cannot find the members' binary"; exit 1; }
probed=1
# Named probes of our own, so that only they are deleted afterwards.
perf probe -q -x "$exe" "klpf_pack=keyload__v1__raft_message__pack type=+$off_type(%di):u32 nent=+$off_nent(%di):u64" &&
  perf probe -q -x "$exe" "klpf_logw=kl_store_log_write" || { echo "peer_frames: perf probe failed"; exit 1; }
sleep 1
perf record -q -e probe_keyloadd:klpf_pack -e probe_keyloadd:klpf_logw -a -o "$tmp/perf.data" -- sleep "$win" >/dev/null 2>&1 ||
  { echo "peer_frames: perf record failed"; exit 1; }
perf probe -q -d probe_keyloadd:klpf_pack -d probe_keyloadd:klpf_logw 2>/dev/null
probed=0
xcell_finish peer_frames "$tmp/run.txt" || exit 1
rate=$xcell_rate
perf script -i "$tmp/perf.data" -F event,trace 2>/dev/null | python3 -c '
import collections, re, sys
rate, win = float(sys.argv[1]), float(sys.argv[2])
names = {0: "PREVOTE", 1: "PREVOTE_RESP", 2: "VOTE", 3: "VOTE_RESP", 4: "APPEND", 5: "APPEND_RESP",
         6: "HEARTBEAT", 7: "HEARTBEAT_RESP", 8: "SNAPSHOT", 9: "SNAPSHOT_RESP", 10: "READ_RESP"}
c = collections.Counter()
writes = 0
for l in sys.stdin:
    if "klpf_logw" in l:
        writes += 1
        continue
    d = dict(re.findall(r"(\w+)=(\S+)", l))
    if "type" not in d:
        continue
    t = int(d["type"], 0)
    name = names.get(t, str(t))
    if t == 4:
        name += " carrying entries" if int(d["nent"], 0) > 0 else " empty"
    c[name] += 1
frames = sum(c.values())
for k, v in c.most_common():
    print("peer_frames: %-26s %d" % (k, v))
print("peer_frames: %d frames and %d log writes in %.0f s at %.1f transfers/s: %.2f frames per log write, "
      "%.2f per transfer (the cell rate is the whole cell\x27s; the probes slow it)" %
      (frames, writes, win, rate, frames / max(writes, 1), frames / (rate * win)))
' "$rate" "$win"
