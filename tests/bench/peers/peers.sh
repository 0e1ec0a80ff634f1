# peers.sh: sourced by tests/bench/run.sh (BENCH_PARTS all or peers). Starts and stops the
# peers KeyLoad is compared with: NATS JetStream R3 (three Debian nats-server processes,
# routes on loopback, file storage under DIR) and a private PostgreSQL 15 cluster (initdb
# into DIR, unix socket only, run as the postgres user). Needs run.sh's stop_pid. Every
# process is tracked by pid and stopped by pid; every wait is bounded.
peers_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jspid=()     # the nats-server processes we started
js_urls=""
# peers_npm: installs the pinned clients (package-lock.json; node_modules is never committed).
peers_npm() {
  command -v node >/dev/null && command -v npm >/dev/null || { echo "bench: peers need node >= 18 and npm"; return 1; }
  [ -d "$peers_dir/node_modules/nats" ] && [ -d "$peers_dir/node_modules/pg" ] &&
    [ "$peers_dir/node_modules/.package-lock.json" -nt "$peers_dir/package-lock.json" ] && return 0
  (cd "$peers_dir" && timeout 180 npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1) ||
    { echo "bench: npm ci in $peers_dir failed:"; tail -n 20 "$peers_dir/npm-ci.log"; return 1; }
  rm -f "$peers_dir/npm-ci.log"
}
# js_up DIR PORT: servers n1..n3 on client ports PORT..PORT+2, routes on PORT+10..PORT+12,
# JetStream store under DIR/nN; then stream BENCH with 3 replicas. Server 2.9 has no
# sync_interval setting: the file store's default applies (data reaches the OS at once and is
# fsynced every 2 minutes and when a block closes, not before each ack).
js_up() {
  local d=$1 port=$2 i j routes="" p
  mkdir -p "$d"
  for i in 0 1 2; do
    for p in $((port + i)) $((port + 10 + i)); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "bench: port $p is already in use; set BENCH_JS_PORT"; return 1
      fi
    done
    routes="$routes${routes:+, }nats-route://127.0.0.1:$((port + 10 + i))"
  done
  for i in 1 2 3; do
    j=$((i - 1))
    cat >"$d/n$i.conf" <<EOC
server_name: n$i
listen: 127.0.0.1:$((port + j))
jetstream { store_dir: "$d/n$i", max_memory_store: 268435456, max_file_store: 8589934592 }
cluster { name: kl-bench, listen: 127.0.0.1:$((port + 10 + j)), routes: [ $routes ] }
EOC
    nats-server -c "$d/n$i.conf" >"$d/n$i.log" 2>&1 &
    jspid+=($!)
  done
  js_urls="nats://127.0.0.1:$port,nats://127.0.0.1:$((port + 1)),nats://127.0.0.1:$((port + 2))"
  for i in 1 2 3; do
    for _ in $(seq 1 100); do
      grep -q 'Server is ready' "$d/n$i.log" 2>/dev/null && break
      kill -0 "${jspid[$((i - 1))]}" 2>/dev/null || break
      sleep 0.1
    done
    grep -q 'Server is ready' "$d/n$i.log" || { echo "bench: nats-server n$i did not start within 10 s:"; tail -n 10 "$d/n$i.log"; return 1; }
  done
  # A JetStream meta leader is needed before a stream can be made: retried, 60 s at most.
  local t
  for t in $(seq 1 12); do
    timeout 30 node "$peers_dir/js.mjs" setup --servers "$js_urls" 2>"$d/setup.err" && return 0
    sleep 2
  done
  echo "bench: JetStream stream BENCH could not be created within 60 s:"; tail -n 3 "$d/setup.err"
  return 1
}
js_down() {
  local p
  for p in "${jspid[@]}"; do stop_pid "$p" nats-server; done
  jspid=()
}
js_pids() { local IFS=,; echo "${jspid[*]}"; }

# pg_up DIR: initdb into DIR/data as postgres (PostgreSQL refuses root), socket in DIR, no
# TCP, fsync and synchronous_commit on (the defaults, set explicitly), the outbox schema.
pg_pid=""
pg_dir=""
pg_bin=/usr/lib/postgresql/15/bin
pg_up() {
  pg_dir=$1
  [ -x "$pg_bin/postgres" ] || { echo "bench: $pg_bin/postgres is missing (make deps)"; return 1; }
  id postgres >/dev/null 2>&1 || { echo "bench: no postgres user (make deps)"; return 1; }
  local as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  [ "$(id -u)" = 0 ] || [ "$(id -un)" = postgres ] || as=(sudo -u postgres)
  # The postgres user must reach DIR: its parents need o+x (var/bench is made 0755).
  local old
  old=$(head -n 1 "$pg_dir/data/postmaster.pid" 2>/dev/null)
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then
    echo "bench: a postgres (pid $old) still runs in $pg_dir; stop it first"; pg_dir=""; return 1
  fi
  rm -rf "$pg_dir"
  mkdir -p "$pg_dir"
  chmod 700 "$pg_dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$pg_dir"
  timeout 120 "${as[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --no-locale \
    >"$pg_dir/initdb.log" 2>&1 || { echo "bench: initdb failed:"; tail -n 10 "$pg_dir/initdb.log"; return 1; }
  timeout 60 "${as[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/pg.log" -w -t 30 start \
    -o "-k $pg_dir -c listen_addresses= -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=50" \
    >"$pg_dir/pg_ctl.log" 2>&1
  pg_pid=$(head -n 1 "$pg_dir/data/postmaster.pid" 2>/dev/null)
  [ -n "$pg_pid" ] && kill -0 "$pg_pid" 2>/dev/null ||
    { pg_pid=""; echo "bench: postgres did not start within 30 s:"; tail -n 10 "$pg_dir/pg.log"; return 1; }
  timeout 60 node "$peers_dir/pg.mjs" setup --host "$pg_dir" 2>"$pg_dir/setup.err" ||
    { echo "bench: outbox schema failed:"; tail -n 3 "$pg_dir/setup.err"; return 1; }
}
# pg_down: a fast shutdown (SIGINT to the postmaster, pid from postmaster.pid), 30 s at most,
# then SIGKILL; the cluster directory is deleted either way.
pg_down() {
  if [ -n "$pg_pid" ] && kill -0 "$pg_pid" 2>/dev/null; then
    kill -INT "$pg_pid" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$pg_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pg_pid" 2>/dev/null && { echo "bench: postgres (pid $pg_pid) still runs after 30 s; killing it"; kill -KILL "$pg_pid"; sleep 0.5; }
  fi
  pg_pid=""
  [ -n "$pg_dir" ] && rm -rf "$pg_dir"
  pg_dir=""
}

# peers_summary RESULTS OUT TMP: prints the KL-9 comparison (summary.py) from RESULTS
# ("CELL,RUN<TAB>line" rows), writes OUT/summary.json (jq) and OUT/latency.png (gnuplot)
# from the latencies in OUT/lat. Non-zero when either file could not be written.
peers_summary() {
  local res=$1 out=$2 t=$3 rc=0
  if python3 "$peers_dir/summary.py" "$res" "$out/lat" "$t/summary.tsv" &&
     jq -Rn '[inputs | split("\t") | {(.[0]): (.[1] | fromjson)}] | add' "$t/summary.tsv" >"$out/summary.json"; then
    echo "bench: wrote $out/summary.json"
  else
    echo "bench: the KL-9 summary could not be written"; rc=1
  fi
  if timeout 60 gnuplot -e "latdir='$out/lat'; out='$out/latency.png'" "$peers_dir/latency.gp" 2>"$t/gnuplot.err"; then
    echo "bench: wrote $out/latency.png (raw latencies: $out/lat/CELL.rRUN.txt, us, one a line)"
  else
    echo "bench: gnuplot failed:"; tail -n 5 "$t/gnuplot.err"; rc=1
  fi
  return $rc
}
