#!/usr/bin/env bash
# Measures a scrape's daemon CPU (README "Metrics (Prometheus)"): a one-member cluster,
# SCRAPES scrapes (default 200) with 1 queue, then with 1,000 queues (the per-queue cap
# applies past KL_METRICS_QUEUES_MAX). CPU is the sum of the daemon's threads'
# /proc/PID/task/*/schedstat run time (ns resolution), minus the idle rate measured just
# before over as long a window. Prints one line per case. Not part of `make test`.
#   tests/cluster/metrics_cost.sh [SCRAPES]
set -u
cd "$(dirname "$0")/../.." || exit 1
n=${1:-200}
name="metricscost$$"
base=$(( 16000 + ($$ % 100) * 3 ))
mkdir -p var
work=$(mktemp -d "$PWD/var/metricscost-XXXXXX")
cfg="$work/cluster.json"
kc() { timeout -k 5 60 deploy/keyload-cluster --config "$cfg" "$@"; }
trap 'kc down >/dev/null 2>&1; rm -rf "var/$name" "$work"' EXIT
cat >"$cfg" <<JSON
{"cluster":"$name","replica_count":1,
 "partitions":[{"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$base","peer":"tcp://127.0.0.1:$((base + 1))",
   "metrics":"127.0.0.1:$((base + 2))"}]}]}
JSON
kc up >/dev/null || { echo "cluster up failed"; exit 1; }
pid=$(cat "var/$name/p0m1.pid")
kl() { timeout -k 5 60 ./bin/keyload --cluster "var/$name/cluster.json" "$@"; }
kl admin bootstrap --tenant default --database first --admin costroot --key-out "$work/root.key" >/dev/null
export KEYLOAD_PRINCIPAL=costroot KEYLOAD_KEY="$work/root.key"
kl database create >/dev/null
kl queue create q0 >/dev/null
kl enqueue q0 hello >/dev/null

url="http://127.0.0.1:$((base + 2))/metrics"
measure() { # label: idle window, then n scrapes, all timed in one Python process
  /usr/bin/python3 - "$url" "$n" "$pid" "$1" <<'PY'
import glob, sys, time, urllib.request
url, n, pid, label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def cpu_ns():
    total = 0
    for f in glob.glob("/proc/%s/task/*/schedstat" % pid):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    if total == 0:
        sys.exit("no schedstat for pid %s" % pid)
    return total
c0, t0 = cpu_ns(), time.monotonic_ns()
time.sleep(2)
c1, t1 = cpu_ns(), time.monotonic_ns()
per = []
page = b""
for _ in range(n):
    a = cpu_ns()
    page = urllib.request.urlopen(url, timeout=10).read()
    per.append(cpu_ns() - a)
c2, t2 = cpu_ns(), time.monotonic_ns()
idle = (c1 - c0) * (t2 - t1) / (t1 - t0)
per.sort()
print("%s: %d scrapes, daemon CPU %.0f us total (idle share %.0f us): %.0f us per scrape; "
      "per-scrape delta median %.0f us, p99 %.0f us (includes idle ticks); wall %.0f us per scrape; page %d bytes"
      % (label, n, (c2 - c1) / 1e3, idle / 1e3, (c2 - c1 - idle) / n / 1e3, per[n // 2] / 1e3,
         per[min(n - 1, n * 99 // 100)] / 1e3, (t2 - t1) / n / 1e3, len(page)))
PY
}
measure "1 queue"
for i in $(seq 1 999); do kl queue create "q$i" >/dev/null || { echo "queue create q$i failed"; exit 1; }; done
measure "1000 queues"
measure "1000 queues (again)"
