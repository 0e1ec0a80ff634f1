#!/usr/bin/env bash
# thread_cpu.sh: where a client-driven transfer's CPU goes, thread by thread. Runs the xcoord
# part of run.sh (3 partitions x 3 members, one client with 32 transfers in flight) and,
# from 2 s into its client-driven cell, reads the user+system time of every thread of every
# keyloadd and keyload-bench from /proc over WINDOW_S seconds. Prints each member's loop
# thread, its RocksDB threads and its other threads in CPUs, then per
# transfer (at the cell's rate): the two busiest loops (the partitions' leaders), the next
# four (their followers), all other daemon threads (log writers, journal keepers), RocksDB's
# flush and compaction threads and the bench client, and the machine's idle share.
#   tests/bench/thread_cpu.sh
#   BENCH_BIN=/path/to/other/bin tests/bench/thread_cpu.sh
# Environment: BENCH_BIN (default bin), BENCH_SECONDS (the cell, default 10), WINDOW_S
#              (default 6, at most BENCH_SECONDS - 3), THREAD_CPU_OUT (a file kept with
#              run.sh's output; default a temporary one that is removed).
# run.sh starts and stops every process by pid; this script starts only run.sh and waits
# for it (at most 15 minutes), and reads only the processes run.sh started.
set -u
cd "$(dirname "$0")/../.." || exit 2
secs=${BENCH_SECONDS:-10}
win=${WINDOW_S:-6}
[ "$win" -le $((secs - 3)) ] || { echo "thread_cpu: WINDOW_S must be at most BENCH_SECONDS - 3"; exit 2; }
if [ -n "${THREAD_CPU_OUT:-}" ]; then out=$THREAD_CPU_OUT; keep=1; else out=$(mktemp /tmp/kl-thread-cpu-XXXXXX); keep=0; fi
. tests/bench/xcell.sh
cleanup() {
  xcell_stop
  [ $keep = 1 ] || rm -f "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
xcell_start "$out"
xcell_wait_cell || { echo "thread_cpu: the transfer cell never started; run.sh said:"; tail -n 5 "$out"; exit 1; }
sleep 2
pids=$(xcell_ours keyloadd; xcell_ours keyload-bench)
[ -n "$pids" ] || { echo "thread_cpu: no member of run.sh's cluster found"; exit 1; }
# shellcheck disable=SC2086
sample=$(python3 - "$win" $pids <<'EOF'
import collections, os, sys, time
HZ = os.sysconf("SC_CLK_TCK")
def snap():
    d = {}
    for pid in sys.argv[2:]:
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            for t in os.listdir(f"/proc/{pid}/task"):
                s = open(f"/proc/{pid}/task/{t}/stat").read()
                name = s[s.index("(") + 1:s.rindex(")")]
                f = s[s.rindex(")") + 2:].split()
                d[(comm, pid, t)] = (name, int(f[11]) + int(f[12]))
        except OSError:
            pass  # a thread or process that ended meanwhile
    idle = int(open("/proc/stat").readline().split()[4])
    return d, idle
a, ia = snap()
t0 = time.time()
time.sleep(float(sys.argv[1]))
b, ib = snap()
dt = time.time() - t0
cpu = collections.Counter()
for k, (name, v) in b.items():
    if k in a:
        comm, pid, tid = k
        role = "loop" if pid == tid else ("rocksdb" if name.startswith("rocksdb") else "other")
        cpu[(comm, pid, role)] += (v - a[k][1]) / HZ / dt
for (comm, pid, role), v in sorted(cpu.items()):
    print("cpu %s %s %s %.4f" % (comm, pid, role, v))
print("idle %.4f" % ((ib - ia) / HZ / dt / os.cpu_count()))
EOF
)
xcell_finish thread_cpu "$out" || exit 1
rate=$xcell_rate
echo "$sample" | grep "^cpu keyloadd" | awk '{printf "thread_cpu: member pid %s %-7s %.3f CPUs\n", $3, $4, $5}'
echo "$sample" | python3 -c '
import sys
rate = float(sys.argv[1])
loops, other, rocks, client, idle = [], 0.0, 0.0, 0.0, 0.0
for l in sys.stdin:
    p = l.split()
    if p[0] == "idle":
        idle = float(p[1]); continue
    comm, role, v = p[1], p[3], float(p[4])
    if comm == "keyload-bench": client += v
    elif role == "loop": loops.append(v)
    elif role == "rocksdb": rocks += v
    else: other += v
loops.sort(reverse=True)
us = lambda v: 1e6 * v / rate
print("thread_cpu: rate=%.1f transfers/s; us per transfer: leader loops %s, follower loops %s, "
      "other daemon threads (log writers, journal keepers) %.0f, rocksdb flush/compaction %.0f, "
      "bench client %.0f; machine idle %.0f%%" % (rate, ",".join("%.0f" % us(v) for v in loops[:2]),
      ",".join("%.0f" % us(v) for v in loops[2:6]), us(other), us(rocks), us(client), 100 * idle))
' "$rate"
