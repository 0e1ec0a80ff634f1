#!/usr/bin/env bash
# The store of a real keyloadd, replayed under another keyloadd binary.
#   daemon-fixture.sh write           runs bin/keyloadd (one partition, one member) on a
#                                     fresh store, sends it the one-partition workload
#                                     (build/golden net-write), stops it and writes
#                                     tests/golden/daemon-store-fixture-<commit>.tar.gz
#   daemon-fixture.sh replay TARBALL  starts bin/keyloadd on a copy of that store and sends
#                                     every recorded request again (build/golden net-replay):
#                                     each answer must be the recorded one, byte for byte
# Data directories are never committed otherwise; this fixture is the explicit exception.
# The daemon is started under `timeout` and stopped by its pid, also when a step fails.
set -u
cd "$(dirname "$0")/../.."
mode=${1:-}
work=$(mktemp -d /tmp/kl-golden-daemon.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Starts bin/keyloadd on $work/fixture/p0m1 at a free loopback port; sets pid and url.
start_daemon() {
  local port tries
  for tries in 1 2 3 4 5; do
    port=$(( 18500 + RANDOM % 500 ))   # the golden suite's range (README "Tests and their budgets")
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue   # taken
    url="tcp://127.0.0.1:$port"
    printf '{"cluster":"golden","replica_count":1,"insecure_local_admin":true,"partitions":[{"id":0,"members":[{"id":1,"client":"%s","data":"%s"}]}]}\n' \
      "$url" "$work/fixture/p0m1" > "$work/cluster.json"
    timeout --kill-after=5 120 ./bin/keyloadd --cluster "$work/cluster.json" --node p0m1 \
      --cluster-secret "$work/cluster.secret" --init-store >>"$work/daemon.log" 2>&1 &
    pid=$!
    sleep 0.5
    if kill -0 "$pid" 2>/dev/null; then return 0; fi
    wait "$pid" 2>/dev/null; pid=
  done
  echo "daemon-fixture: keyloadd did not start:"; tail -n 20 "$work/daemon.log"; exit 1
}

stop_daemon() {
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=
}

./build/golden secret "$work/cluster.secret" || exit 1
case "$mode" in
  write)
    mkdir -p "$work/fixture/p0m1"
    start_daemon
    ./build/golden net-write "$url" "$work/fixture" 2>>"$work/golden.log" ||
      { tail -n 20 "$work/golden.log" "$work/daemon.log"; exit 1; }
    stop_daemon
    # RocksDB's info logs hold host names and paths; the LOCK file is recreated at open.
    find "$work/fixture" \( -name 'LOG*' -o -name LOCK \) -delete
    out=tests/golden/daemon-store-fixture-$(git log -1 --format=%h -- daemon common proto).tar.gz
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf - fixture | gzip -n -9 > "$out"
    echo "wrote $out ($(stat -c %s "$out") bytes, $(wc -l < "$work/fixture/requests.txt") requests)"
    ;;
  replay)
    tar -xzf "${2:?tarball}" -C "$work" || exit 1
    start_daemon
    if ! ./build/golden net-replay "$url" "$work/fixture" 2>>"$work/golden.log"; then
      tail -n 5 "$work/golden.log"; echo "--- keyloadd log ---"; tail -n 20 "$work/daemon.log"; exit 1
    fi
    stop_daemon
    ;;
  *) echo "usage: daemon-fixture.sh write | replay TARBALL"; exit 2 ;;
esac
