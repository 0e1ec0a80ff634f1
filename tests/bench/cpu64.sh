#!/usr/bin/env bash
# cpu64.sh: the peers part's RF3 sealed 64-in-flight cell alone (single-message batches,
# principal benchpub on queue kl3, as run.sh sets them up), on a fresh 3-member cluster per
# run, to measure what each acknowledged message costs in CPU. Per run it prints msg/s, p50,
# p99, the members' user+sys CPU per acknowledged message over the bench's measured window
# (keyload-bench --cpu-pids), and each member's part of it with its context switches per
# message (all threads' voluntary + involuntary switches from /proc/PID/task/*/status). The
# per-member split comes from counters read before and after the whole bench process,
# scaled to the measured window's total: the few seconds of session setup are a small part
# of a 10 s cell.
# A/B: CPU64_BINS="dirA dirB" alternates the builds (A B A B ...) CPU64_RUNS times each.
# CPU64_PERF=1 records the leader and one follower with `perf record -g` during the cell
# (reports kept in CPU64_OUT).
# Environment: CPU64_BINS (default bin), CPU64_RUNS (default 3), BENCH_SECONDS (default 10),
#              CPU64_PORT (first client port, default 18731; peers +100), CPU64_CLIENTS
#              (default 64), CPU64_IN_FLIGHT (batches outstanding per client, default 1;
#              `CPU64_CLIENTS=1 CPU64_IN_FLIGHT=64` is the peers bench's cell), CPU64_BENCH (one
#              keyload-bench for every build, default each build's own), CPU64_OUT (a directory kept for logs; default a temporary one that
#              is removed), CPU64_PERF=1.
# Every process this script starts is tracked by pid and stopped by pid on exit.
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$(pwd)
bins=${CPU64_BINS:-bin}
runs=${CPU64_RUNS:-3}
secs=${BENCH_SECONDS:-10}
port=${CPU64_PORT:-18731}
clients=${CPU64_CLIENTS:-64}
in_flight=${CPU64_IN_FLIGHT:-1}
for b in $bins; do
  for x in keyload-bench keyloadd keyload; do
    [ -x "$b/$x" ] || { echo "cpu64: $b/$x is missing; run make first"; exit 2; }
  done
done
if [ -n "${CPU64_OUT:-}" ]; then tmp=$CPU64_OUT; keep=1; mkdir -p "$tmp" || exit 2; else tmp=$(mktemp -d /tmp/kl-cpu64-XXXXXX); keep=0; fi
declare -A mpid
perf_pids=()
stop_pid() {
  local p=$1
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  fi
  [ -n "$p" ] && { wait "$p"; } 2>/dev/null
}
stop_cluster() {
  local k
  for k in "${!mpid[@]}"; do stop_pid "${mpid[$k]}"; unset "mpid[$k]"; done
}
cleanup() {
  local p
  for p in "${perf_pids[@]}"; do stop_pid "$p"; done
  stop_cluster
  if [ $keep = 1 ]; then echo "cpu64: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in $port $((port + 1)) $((port + 2)) $((port + 100)) $((port + 101)) $((port + 102)); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "cpu64: port $p in use; set CPU64_PORT"; exit 2; fi
done

# counters NODE: "utime+stime_ticks ctxsw" of all threads of that member
counters() {
  local p=${mpid[$1]} cpu sw
  cpu=$(awk '{ s = $0; sub(/^.*\) /, "", s); split(s, a, " "); print a[12] + a[13] }' "/proc/$p/stat")
  sw=$(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }')
  echo "$cpu $sw"
}

# threads NODE: "tid comm cpu_ticks ctxsw" per thread of that member
threads() {
  local f t
  for f in /proc/"${mpid[$1]}"/task/*; do
    t=${f##*/}
    awk -v t="$t" -v sw="$(awk '/ctxt_switches/ { n += $2 } END { print n + 0 }' "$f/status" 2>/dev/null)" \
      '{ s = $0; c = s; sub(/^[^(]*\(/, "", c); sub(/\).*$/, "", c); gsub(/ /, "_", c); sub(/^.*\) /, "", s);
         split(s, a, " "); print t, c, a[12] + a[13], sw }' "$f/stat" 2>/dev/null
  done
}

# one_run LABEL BIN: a fresh cluster from BIN, the cell, the figures, the cluster stopped.
one_run() {
  local label=$1 bin=$2 d=$tmp/$1 n
  rm -rf "$d"
  mkdir -p "$d/bin"
  cp "${CPU64_BENCH:-$bin/keyload-bench}" "$d/bin/keyload-bench" || return 2
  cp "$bin/keyloadd" "$bin/keyload" "$d/bin/" || return 2
  local bench=$d/bin/keyload-bench daemon=$d/bin/keyloadd cli=$d/bin/keyload
  "$daemon" keygen --cluster-secret-out "$d/cluster.secret" >/dev/null || return 2
  for n in p0m1 p0m2 p0m3; do "$daemon" keygen --secret-out "$d/$n.key" >"$d/$n.pub" || return 2; done
  python3 - "$root/deploy/local-rf3.json" "$d" "$port" <<'EOF' || return 2
import json, sys
src, d, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open(src))
c["cluster"] = "bench-cpu64"
c["replica_count"] = 3
c["insecure_local_admin"] = False
p0 = [p for p in c["partitions"] if p["id"] == 0][0]
c["partitions"] = [p0]
for i, m in enumerate(p0["members"]):
    m["client"] = "tcp://127.0.0.1:%d" % (port + i)
    m["peer"] = "tcp://127.0.0.1:%d" % (port + 100 + i)
    m["data"] = "%s/p0m%d" % (d, m["id"])
    m.pop("metrics", None)
    m["public_key"] = open("%s/p0m%d.pub" % (d, m["id"])).read().strip()
json.dump(c, open(d + "/cluster.json", "w"), indent=2)
EOF
  local urls="tcp://127.0.0.1:$port,tcp://127.0.0.1:$((port + 1)),tcp://127.0.0.1:$((port + 2))"
  for n in p0m1 p0m2 p0m3; do
    "$daemon" --cluster "$d/cluster.json" --node "$n" --data "$d/$n" --cluster-secret "$d/cluster.secret" \
      --init-store --member-key "$d/$n.key" 2>>"$d/$n.log" &
    mpid[$n]=$!
  done
  for n in p0m1 p0m2 p0m3; do
    for _ in $(seq 1 200); do grep -q 'msg="ready"' "$d/$n.log" 2>/dev/null && break; kill -0 "${mpid[$n]}" 2>/dev/null || break; sleep 0.1; done
    grep -q 'msg="ready"' "$d/$n.log" || { echo "cpu64: $label: $n not ready"; tail -n 20 "$d/$n.log"; return 1; }
  done
  "$bench" --leader-of "$urls" >/dev/null || { echo "cpu64: $label: no serving leader"; return 1; }
  adm() { timeout 60 "$cli" --cluster "$d/cluster.json" --database bench/kl3 --timeout 20000 "$@" >>"$d/setup.log" 2>&1; }
  adm admin bootstrap --tenant bench --database kl3 --admin benchadmin --key-out "$d/admin.key" \
    --cluster-secret "$d/cluster.secret" || { echo "cpu64: $label: bootstrap failed"; tail -n 5 "$d/setup.log"; return 1; }
  local A=(--principal benchadmin --key "$d/admin.key")
  adm "${A[@]}" queue create kl3 --partition 0 --max-messages 100000000 --max-bytes 107374182400 &&
    adm "${A[@]}" principal create benchpub --key-out "$d/pub.key" &&
    adm "${A[@]}" principal grant benchpub QueuePublish --queue kl3 || { echo "cpu64: $label: setup failed"; tail -n 5 "$d/setup.log"; return 1; }
  local ldr lnode fnode
  ldr=$("$bench" --leader-of "$urls")
  lnode=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' <<<"$ldr" | head -n 1 | awk -v p="$port" '{print "p0m" ($1 - p + 1)}')
  [ -n "${mpid[$lnode]:-}" ] || { echo "cpu64: $label: cannot tell the leader from '$ldr'"; return 1; }
  for n in p0m1 p0m2 p0m3; do [ "$n" != "$lnode" ] && { fnode=$n; break; }; done
  sleep 1
  declare -A c0 c1
  for n in p0m1 p0m2 p0m3; do c0[$n]=$(counters "$n"); done
  threads "$lnode" >"$d/threads0"; threads "$fnode" >"$d/fthreads0"
  if [ "${CPU64_PERF:-0}" = 1 ]; then
    perf record -g -o "$d/perf-leader.data" -p "${mpid[$lnode]}" 2>"$d/perf-leader.err" &
    perf_pids+=($!)
    perf record -g -o "$d/perf-follower.data" -p "${mpid[$fnode]}" 2>"$d/perf-follower.err" &
    perf_pids+=($!)
  fi
  local out
  out=$(timeout $((secs * 3 + 120)) "$bench" --cluster "$d/cluster.json" --principal benchpub --key "$d/pub.key" \
        --database bench/kl3 --queue kl3 --batch-size 1 --seconds "$secs" --clients "$clients" \
        --in-flight "$in_flight" --cpu-pids "${mpid[p0m1]},${mpid[p0m2]},${mpid[p0m3]}" 2>"$d/bench.err")
  for n in p0m1 p0m2 p0m3; do c1[$n]=$(counters "$n"); done
  threads "$lnode" >"$d/threads1"; threads "$fnode" >"$d/fthreads1"
  local p
  for p in "${perf_pids[@]}"; do kill -INT "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  perf_pids=()
  local mps p50 p99 cpu
  mps=$(grep -o 'msgs_per_s=[0-9.]*' <<<"$out" | cut -d= -f2)
  p50=$(grep -o 'p50_us=[0-9.]*' <<<"$out" | cut -d= -f2)
  p99=$(grep -o 'p99_us=[0-9.]*' <<<"$out" | cut -d= -f2)
  cpu=$(grep -o ' cpu_us_per_msg=[0-9.]*' <<<"$out" | cut -d= -f2)
  local ccpu
  ccpu=$(grep -o 'client_cpu_us_per_msg=[0-9.]*' <<<"$out" | cut -d= -f2)
  if [ -z "$mps" ] || [ -z "$cpu" ]; then
    echo "cpu64: $label ($bin): no result: ${out:-none}"; tail -n 5 "$d/bench.err"; return 1
  fi
  local line="cpu64: $label ($bin) msgs_per_s=$mps p50_us=$p50 p99_us=$p99 cpu_us_per_msg=$cpu client_cpu_us_per_msg=${ccpu:-n/a}"
  local tot=0 role
  for n in p0m1 p0m2 p0m3; do tot=$(( tot + ${c1[$n]%% *} - ${c0[$n]%% *} )); done
  for n in p0m1 p0m2 p0m3; do
    role=follower; [ "$n" = "$lnode" ] && role=leader
    line+=$(awk -v n="$n" -v r="$role" -v tot="$tot" -v cpu="$cpu" -v hz="$(getconf CLK_TCK)" -v a="${c0[$n]}" -v b="${c1[$n]}" 'BEGIN {
        split(a, x, " "); split(b, y, " "); dc = y[1] - x[1]; ds = y[2] - x[2];
        us = tot > 0 ? cpu * dc / tot : 0; msgs = cpu > 0 ? tot * 1e6 / hz / cpu : 0;
        printf " %s(%s)_cpu_us=%.1f ctxsw_per_msg=%.2f", n, r, us, (msgs > 0 ? ds / msgs : 0) }')
  done
  echo "$line"
  if [ "${CPU64_THREADS:-0}" = 1 ]; then
    # per thread name: CPU us and context switches per acknowledged message (same scaling)
    local w
    for w in leader:threads follower:fthreads; do
      awk -v who="${w%%:*}" -v tot="$tot" -v cpu="$cpu" -v hz="$(getconf CLK_TCK)" 'NR == FNR { c[$1] = $3; s[$1] = $4; next }
          { dc[$2] += $3 - c[$1]; ds[$2] += $4 - s[$1] }
          END { msgs = cpu > 0 ? tot * 1e6 / hz / cpu : 0; if (msgs == 0) exit;
                for (k in dc) printf "cpu64:   %s %s cpu_us=%.1f ctxsw_per_msg=%.2f\n", who, k, dc[k] * 1e6 / hz / msgs, ds[k] / msgs }' \
        "$d/${w#*:}0" "$d/${w#*:}1" | sort
    done
  fi
  if [ "${CPU64_PERF:-0}" = 1 ]; then
    for r in leader follower; do
      perf report -i "$d/perf-$r.data" --no-children --percent-limit 0.5 --stdio -g none 2>/dev/null | grep -v '^$' | grep '%' | head -n 60 >"$d/perf-$r.txt"
      perf report -i "$d/perf-$r.data" --no-children --sort comm --stdio -g none 2>/dev/null | grep '%' >"$d/perf-$r-threads.txt"
      perf report -i "$d/perf-$r.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' >"$d/perf-$r-dso.txt"
    done
    echo "cpu64: $label perf reports in $d/perf-{leader,follower}{,-threads,-dso}.txt"
  fi
  for n in p0m1 p0m2 p0m3; do kill -0 "${mpid[$n]}" 2>/dev/null || { echo "cpu64: $label: $n died"; tail -n 20 "$d/$n.log"; return 1; }; done
  stop_cluster
  return 0
}

rc=0
for r in $(seq 1 "$runs"); do
  i=0
  for b in $bins; do
    i=$((i + 1))
    one_run "r$r-b$i" "$b" || rc=1
    stop_cluster
  done
done
exit $rc
