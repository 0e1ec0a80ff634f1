# xcell.sh: sourced by thread_cpu.sh and peer_frames.sh, which measure run.sh's client-driven
# transfer cell from outside. xcell_start FILE starts run.sh's xcoord part (BENCH_BIN,
# BENCH_SECONDS as the caller set them; one round, the 32-in-flight cell) in the background,
# its output in FILE and the pid of its `timeout` in xcell_pid; xcell_wait_cell waits until
# that run's transfer client runs (at most 5 minutes); xcell_ours lists the processes of a
# name that descend from it, so a measurement never reads or probes anybody else's
# keyloadd; xcell_finish waits for it to end and reads the cell's rate; xcell_stop stops it
# (run.sh then stops its members by pid) and waits.
xcell_pid=""

xcell_start() {
  BENCH_BIN=${BENCH_BIN:-bin} BENCH_PARTS=xcoord BENCH_XCOORD_CELLS=32 BENCH_SECONDS="${BENCH_SECONDS:-10}" \
    BENCH_ROUNDS=1 timeout 900 bash tests/bench/run.sh >"$1" 2>&1 &
  xcell_pid=$!
}

# Whether process $1 descends from process $2.
xcell_descends() {
  local p=$1
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    [ "$p" = "$2" ] && return 0
    p=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
  done
  return 1
}

# The pids of the processes named $1 (or, with -f PATTERN, whose command line matches) that
# the run started, one per line.
xcell_ours() {
  local p
  for p in $(if [ "$1" = -f ]; then pgrep -f -- "$2"; else pgrep -x "$1"; fi); do
    if xcell_descends "$p" "$xcell_pid"; then echo "$p"; fi
  done
}

# Returns 0 once the run's transfer client is running, 1 if the run ended or 5 minutes passed.
xcell_wait_cell() {
  local _
  for _ in $(seq 1 3000); do
    [ -n "$(xcell_ours -f "keyload-bench --transfer")" ] && return 0
    kill -0 "$xcell_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

xcell_stop() {
  if [ -n "$xcell_pid" ] && kill -0 "$xcell_pid" 2>/dev/null; then
    kill -TERM "$xcell_pid" 2>/dev/null
    wait "$xcell_pid" 2>/dev/null
  fi
  xcell_pid=""
}

# xcell_finish NAME FILE: waits for the run; on success xcell_rate is its client-driven cell's
# transfers/s, else NAME's reason is printed and it returns 1.
xcell_rate=""
xcell_finish() {
  local rc
  wait "$xcell_pid"
  rc=$?
  xcell_pid=""
  [ $rc -eq 0 ] || { echo "$1: run.sh failed (exit $rc):"; tail -n 5 "$2"; return 1; }
  xcell_rate=$(grep "^transfer: " "$2" | head -n 1 | grep -o "transfers_per_s=[0-9.]*" | cut -d= -f2)
  [ -n "$xcell_rate" ] || { echo "$1: no transfer line in run.sh's output"; return 1; }
}
