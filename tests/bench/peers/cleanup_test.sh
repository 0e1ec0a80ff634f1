#!/usr/bin/env bash
# cleanup_test.sh: a `make peers` run stopped half way leaves nothing behind. Starts
# BENCH_PARTS=peers tests/bench/run.sh (1 s cells) and sends it SIGTERM twice: once while
# the three nats-server processes run (their pids from its "JetStream R3 ready" line), once,
# in a second run, while the PostgreSQL outbox runs (the postmaster's pid from
# var/bench/pg/data/postmaster.pid). Each time every one of those processes must have ended
# and var/bench/pg must be gone within 120 s of the signal. Needs `make all` first.
# Run: bash tests/bench/peers/cleanup_test.sh (real processes; about 3 minutes).
set -u
cd "$(dirname "$0")/../../.."
root=$(pwd)
t=$(mktemp -d)
bpid=""
passed=0 failed=0
check() {
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
}
js=""
pg=""
# finish: our own run.sh, if it still runs (SIGTERM, SIGKILL after 120 s), and whatever a
# failing run.sh left behind: the nats-server and postmaster pids it reported, its pg dir.
finish() {
  local p
  if [ -n "$bpid" ] && kill -0 "$bpid" 2>/dev/null; then
    kill -TERM "$bpid"
    for _ in $(seq 1 1200); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$bpid" 2>/dev/null
  fi
  for p in $js $pg; do kill -0 "$p" 2>/dev/null && { echo "cleanup: pid $p was left running"; kill -KILL "$p"; }; done
  [ -n "$pg" ] && rm -rf "$root/var/bench/pg"
  rm -rf "$t"
}
trap finish EXIT
# wait_for FILE PATTERN SECONDS: 0 once FILE holds PATTERN
wait_for() {
  for _ in $(seq 1 $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$bpid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
all_gone() {  # PID...: 0 when none of them runs within 120 s
  local p
  for _ in $(seq 1 1200); do
    for p in "$@"; do kill -0 "$p" 2>/dev/null && break; p=""; done
    [ -z "$p" ] && return 0
    sleep 0.1
  done
  return 1
}
all_run() {  # PID...: 0 when every one runs
  local p
  for p in "$@"; do kill -0 "$p" 2>/dev/null || return 1; done
}
stop_run() {  # SIGTERM to run.sh; 0 when it ended within 120 s
  kill -TERM "$bpid"
  for _ in $(seq 1 1200); do kill -0 "$bpid" 2>/dev/null || { wait "$bpid" 2>/dev/null; bpid=""; return 0; }; sleep 0.1; done
  return 1
}

# 1: stopped while JetStream runs.
BENCH_SECONDS=1 BENCH_PARTS=peers bash tests/bench/run.sh >"$t/run1.log" 2>&1 &
bpid=$!
if wait_for "$t/run1.log" 'JetStream R3 ready' 180; then
  js=$(sed -n 's/.*JetStream R3 ready (.*, pids \([0-9,]*\)).*/\1/p' "$t/run1.log" | tr ',' ' ')
  check "three nats-server pids reported" [ "$(wc -w <<<"$js")" = 3 ]
  # shellcheck disable=SC2086
  check "they run" all_run $js
  check "run.sh ends after SIGTERM" stop_run
  # shellcheck disable=SC2086
  check "every nats-server stopped" all_gone $js
else
  check "JetStream started within 180 s" false
  tail -n 20 "$t/run1.log"
fi
finish_one() { [ -z "$bpid" ] || { kill -KILL "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; bpid=""; }; }
finish_one

# 2: stopped while the PostgreSQL outbox runs.
BENCH_SECONDS=1 BENCH_PARTS=peers bash tests/bench/run.sh >"$t/run2.log" 2>&1 &
bpid=$!
if wait_for "$t/run2.log" 'PostgreSQL outbox, 1 clients' 400; then
  pg=$(head -n 1 "$root/var/bench/pg/data/postmaster.pid" 2>/dev/null)
  check "the postmaster runs" kill -0 "${pg:-0}"
  check "run.sh ends after SIGTERM" stop_run
  check "the postmaster stopped" all_gone "${pg:-0}"
  check "var/bench/pg deleted" [ ! -e "$root/var/bench/pg" ]
else
  check "the outbox started within 400 s" false
  tail -n 20 "$t/run2.log"
fi
finish_one
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
