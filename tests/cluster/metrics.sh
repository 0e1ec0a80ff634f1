#!/usr/bin/env bash
# Prometheus metrics end to end (ARCHITECTURE.md "Metrics"): an RF3 partition started by
# deploy/keyload-cluster whose members serve /metrics on 127.0.0.1, on 127.0.0.2 (loopback
# too: no token needed) and on 0.0.0.0 (not loopback: a bearer token file is required).
# Every member is scraped and parsed with prometheus_client's parser
# (tests/cluster/metrics_scrape.py); counters must move with a workload (N enqueues: the
# committed-entries counter rises by at least N, since every CLI enqueue is its own batch;
# queue depth and in-flight equal what the workload left, on every member); the token
# member answers 401 without or with a wrong token and 200 with it; no scrape contains a
# body or the principal's name; `keyload-cluster status --json` shows each member's
# metrics address. Also: a cluster file with a malformed or non-loopback-without-token
# metrics address is refused naming the field, and `keyloadd --metrics-addr` (with
# --metrics-token-file) overrides the cluster file's address under the same refusals (a
# one-member daemon started directly, before the cluster, on this run's ports). Then the
# daemon's transfer series on a three-partition cluster (RF1, the same ports once the RF3
# one is down): one transfer delivered (partition 1 -> 2) moves created, pending and
# delivered on partition 1; one Accept into a full queue, a committed RESOURCE_EXHAUSTED
# refusal, moves failed{code=RESOURCE_EXHAUSTED} on partition 2. Ports 15000-15899 (below the ephemeral
# range), nine per run from the pid; every process is stopped by pid file on exit.
set -u
cd "$(dirname "$0")/../.." || exit 1
name="metricstest$$"
base=$(( 15000 + ($$ % 100) * 9 ))   # clients base..+2, peers +3..+5, metrics +6..+8
mkdir -p var
work=$(mktemp -d "$PWD/var/metrics-XXXXXX")
cfg="$work/cluster.json"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
kc() { timeout -k 5 60 deploy/keyload-cluster --config "$cfg" "$@"; }
dpid=""
cleanup() {
  [ -n "$dpid" ] && { kill -KILL "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  kc down >/dev/null 2>&1
  [ -f "$work/cluster3.json" ] && timeout -k 5 60 deploy/keyload-cluster --config "$work/cluster3.json" down >/dev/null 2>&1
  rm -rf "var/$name" "var/${name}x" "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

token="$work/metrics.token"
head -c 24 /dev/urandom | base64 | tr -d '\n=' >"$token"
chmod 600 "$token"
m1="127.0.0.1:$((base + 6))" m2="127.0.0.2:$((base + 7))" m3="0.0.0.0:$((base + 8))"
cat >"$cfg" <<JSON
{"cluster":"$name","replica_count":3,"timers":{"tick_ms":50,"election_ms":800,"heartbeat_ms":150},
 "partitions":[{"id":0,"members":[
  {"id":1,"client":"tcp://127.0.0.1:$base","peer":"tcp://127.0.0.1:$((base + 3))","metrics":"$m1"},
  {"id":2,"client":"tcp://127.0.0.1:$((base + 1))","peer":"tcp://127.0.0.1:$((base + 4))","metrics":"$m2"},
  {"id":3,"client":"tcp://127.0.0.1:$((base + 2))","peer":"tcp://127.0.0.1:$((base + 5))","metrics":"$m3",
   "metrics_token_file":"$token"}]}]}
JSON

# ---- the cluster file's checks (no process needed: the CLI loads the same parser)
badcfg="$work/bad.json"
jq '.partitions[0].members[0].metrics = "127.0.0.1"' "$cfg" >"$badcfg"
out=$(timeout 20 ./bin/keyload --cluster "$badcfg" --json cluster-status 2>&1)
grep -q 'metrics' <<<"$out" && ok "a metrics address without a port is refused naming metrics" ||
  bad "malformed metrics address: $out"
jq '.partitions[0].members[2] |= del(.metrics_token_file)' "$cfg" >"$badcfg"
out=$(timeout 20 ./bin/keyload --cluster "$badcfg" --json cluster-status 2>&1)
grep -q 'metrics_token_file' <<<"$out" && ok "0.0.0.0 without a token file is refused naming metrics_token_file" ||
  bad "non-loopback without token: $out"

# ---- keyloadd --metrics-addr / --metrics-token-file override the member's cluster-file values
one="$work/one.json"
cat >"$one" <<JSON
{"cluster":"${name}one","replica_count":1,"partitions":[{"id":0,"members":[
  {"id":1,"client":"tcp://127.0.0.1:$base","peer":"tcp://127.0.0.1:$((base + 3))","metrics":"127.0.0.1:$((base + 6))"}]}]}
JSON
kd() { timeout -k 5 20 ./bin/keyloadd --cluster "$one" --node p0m1 --var "$work/var" --init-store "$@"; }
out=$(kd --metrics-addr "0.0.0.0:$((base + 8))" 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- '--metrics-addr is not a loopback address' <<<"$out" && grep -q -- '--metrics-token-file' <<<"$out" &&
  ok "keyloadd --metrics-addr 0.0.0.0 without a token file exits 2 naming --metrics-token-file" ||
  bad "--metrics-addr 0.0.0.0 without a token: rc=$rc $out"
out=$(kd --metrics-addr "127.0.0.1" 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- '--metrics-addr must be HOST:PORT' <<<"$out" &&
  ok "keyloadd --metrics-addr without a port exits 2 naming --metrics-addr" || bad "--metrics-addr malformed: rc=$rc $out"
out=$(kd --metrics-addr "example.com:$((base + 7))" --metrics-token-file "$token" 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- '--metrics-addr must be HOST:PORT' <<<"$out" &&
  ok "keyloadd --metrics-addr with a host name exits 2 even with a token file" || bad "--metrics-addr host name: rc=$rc $out"
check "the refused starts created no store" [ ! -e "$work/var/${name}one/p0m1" ]
check "keyloadd --help names --metrics-addr and --metrics-token-file" \
  bash -c './bin/keyloadd --help 2>&1 | grep -q -- "--metrics-addr HOST:PORT" && ./bin/keyloadd --help 2>&1 | grep -q -- "--metrics-token-file FILE"'
# the override serves on its address (with the token it needs); the cluster file's is unused
daemon_up() { # daemon_up URL [token]: waits up to 10 s for an HTTP answer, prints its status
  local st=""
  for _ in $(seq 1 100); do
    st=$(timeout -k 2 5 /usr/bin/python3 tests/cluster/metrics_scrape.py "$1" ${2:+--token "$2"} --status-only 2>/dev/null |
         jq -r .status 2>/dev/null) && [ -n "$st" ] && break
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.1
  done
  echo "${st:-none}"
}
for variant in loopback token; do
  if [ $variant = loopback ]; then
    ./bin/keyloadd --cluster "$one" --node p0m1 --var "$work/var" --init-store \
      --metrics-addr "127.0.0.2:$((base + 7))" >"$work/one.log" 2>&1 &
    dpid=$!; u="http://127.0.0.2:$((base + 7))/metrics"
    check "--metrics-addr 127.0.0.2 (loopback, no token): 200" [ "$(daemon_up "$u")" = 200 ]
  else
    ./bin/keyloadd --cluster "$one" --node p0m1 --var "$work/var" \
      --metrics-addr "0.0.0.0:$((base + 8))" --metrics-token-file "$token" >"$work/one.log" 2>&1 &
    dpid=$!; u="http://127.0.0.1:$((base + 8))/metrics"
    check "--metrics-addr 0.0.0.0 with --metrics-token-file: 200 with the token" [ "$(daemon_up "$u" "$token")" = 200 ]
    check "--metrics-addr 0.0.0.0 with --metrics-token-file: 401 without it" [ "$(daemon_up "$u")" = 401 ]
  fi
  st=$(timeout -k 2 5 /usr/bin/python3 tests/cluster/metrics_scrape.py "http://127.0.0.1:$((base + 6))/metrics" --status-only 2>&1)
  [ $? = 2 ] && ok "$variant: the cluster file's metrics address is not served" || bad "$variant: cluster-file address answered: $st"
  kill -TERM "$dpid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; dpid=""
done

if ! /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
  bad "python3-prometheus-client is not installed (make deps)"; echo "$passed passed, $failed failed"; exit 1
fi
if ! kc up >/dev/null; then bad "cluster up"; tail -n 5 "var/$name"/*.log; echo "$passed passed, $failed failed"; exit 1; fi
ok "cluster up (members with metrics addresses)"

# Debian's python3 (python3-prometheus-client, installed by `make deps`), not a pyenv shim.
py=/usr/bin/python3
scrape() { # scrape URL [args...]: JSON on stdout
  timeout -k 5 20 "$py" tests/cluster/metrics_scrape.py "$@"
}
url1="http://$m1/metrics" url2="http://$m2/metrics" url3="http://127.0.0.1:$((base + 8))/metrics"
val() { jq -r --arg k "$2" '.samples[$k] // "missing"' <<<"$1"; }

# ---- status --json names every member's metrics address
st=$(kc status --json 2>/dev/null)
[ "$(jq -r '[.partitions[0].members[] | .metrics] | sort | join(" ")' <<<"$st")" = "$(printf '%s\n' "$m1" "$m2" "$m3" | sort | paste -sd' ')" ] &&
  [ "$(jq -r '[.nodes[].metrics] | length' <<<"$st")" = 3 ] &&
  ok "status --json shows each member's metrics address" || bad "status metrics: $(jq -c '.partitions[0].members' <<<"$st")"

# ---- the token member: 401 without, with a wrong token; 200 with it
s=$(scrape "$url3" --status-only); check "0.0.0.0 member: 401 without a token" [ "$(jq -r .status <<<"$s")" = 401 ]
wrong="$work/wrong.token"; echo "not-the-token-at-all-0123" >"$wrong"
s=$(scrape "$url3" --token "$wrong" --status-only); check "0.0.0.0 member: 401 with a wrong token" [ "$(jq -r .status <<<"$s")" = 401 ]
s=$(scrape "$url3" --token "$token"); check "0.0.0.0 member: 200 with the token" [ "$(jq -r .status <<<"$s")" = 200 ]
s=$(scrape "$url2"); check "127.0.0.2 member (loopback): 200 without a token" [ "$(jq -r .status <<<"$s")" = 200 ]
for n in 1 2 3; do
  log="var/$name/p0m$n.log"
  if grep -qF "$(cat "$token")" "$log"; then bad "the token appears in p0m$n's log"; else ok "the token is not in p0m$n's log"; fi
done

# ---- format: every sample's family has HELP and TYPE; the series the brief names exist
s=$(scrape "$url1")
check "scrape parses (prometheus_client), status 200" [ "$(jq -r .status <<<"$s")" = 200 ]
check "content type is the text format 0.0.4" grep -q 'version=0.0.4' <<<"$(jq -r .content_type <<<"$s")"
missing=""
for f in keyload_raft_commit_latency_seconds:histogram keyload_raft_log_fsync_seconds:histogram \
         keyload_raft_appended_entries:counter keyload_raft_appended_bytes:counter \
         keyload_raft_committed_entries:counter keyload_raft_applied_index:gauge keyload_raft_term:gauge \
         keyload_raft_role:gauge keyload_raft_elections:counter keyload_raft_snapshots:counter \
         keyload_raft_compactions:counter keyload_queue_depth_messages:gauge \
         keyload_queue_in_flight_messages:gauge keyload_sessions:gauge keyload_refusals:counter \
         keyload_process_resident_memory_bytes:gauge keyload_metrics_series_dropped:counter \
         keyload_journal_direct:gauge; do
  [ "$(jq -r --arg n "${f%%:*}" '.families[$n] | "\(.type):\(.help | length > 0)"' <<<"$s")" = "${f#*:}:true" ] ||
    missing="$missing ${f%%:*}"
done
check "every named family exists with its TYPE and a HELP text${missing:+ (missing:$missing)}" [ -z "$missing" ]
[ "$(val "$s" 'keyload_raft_log_fsync_seconds_bucket{le=+Inf}')" = "$(val "$s" 'keyload_raft_log_fsync_seconds_count{}')" ] &&
  ok "fsync histogram: +Inf bucket equals _count" || bad "fsync histogram +Inf/_count"
# The journal writes directly exactly where the members' data directory takes O_DIRECT.
if python3 -c "import os,sys; p=sys.argv[1]+'/.direct-probe'; fd=os.open(p, os.O_RDWR|os.O_CREAT|os.O_DIRECT, 0o600); os.close(fd); os.unlink(p)" "var/$name" 2>/dev/null; then want_direct=1; else want_direct=0; fi
check "keyload_journal_direct is $want_direct where var/ takes O_DIRECT ($want_direct)" \
  [ "$(val "$s" 'keyload_journal_direct{}')" = "$want_direct" ]
rss=$(val "$s" 'keyload_process_resident_memory_bytes{}')
check "RSS is over 1 MiB ($rss)" python3 -c "import sys; sys.exit(0 if float('$rss') > 1<<20 else 1)"

# ---- workload: bootstrap, a queue, N enqueues with a marked body, K received (leased)
keys="$work/keys"; mkdir -p "$keys"; chmod 700 "$keys"
kl() { timeout -k 5 60 ./bin/keyload --cluster "var/$name/cluster.json" "$@"; }
kl admin bootstrap --tenant default --database first --admin metricsroot --key-out "$keys/root.key" >/dev/null ||
  bad "bootstrap"
export KEYLOAD_PRINCIPAL=metricsroot KEYLOAD_KEY="$keys/root.key"
kl database create >/dev/null || bad "database create"
kl queue create jobs >/dev/null || bad "queue create"
# the leader: the member whose role series says leader
leader_url=""
for u in "$url1" "$url2"; do
  [ "$(val "$(scrape "$u")" 'keyload_raft_role{role=leader}')" = 1.0 ] && leader_url=$u
done
[ -n "$leader_url" ] || leader_url=$url3
lscrape() { if [ "$leader_url" = "$url3" ]; then scrape "$url3" --token "$token" "$@"; else scrape "$leader_url" "$@"; fi; }
before=$(lscrape)
c0=$(val "$before" 'keyload_raft_committed_entries_total{}')
a0=$(val "$before" 'keyload_raft_appended_entries_total{}')
N=20 K=5 marker="secretbody$$x"
for i in $(seq 1 $N); do kl enqueue jobs "$marker-$i" >/dev/null || bad "enqueue $i"; done
kl receive jobs --max $K --lease-ms 60000 >/dev/null || bad "receive"
kl enqueue nosuchqueue "$marker-refused" >/dev/null 2>&1   # a refusal to count
after=$(lscrape --raw "$work/leader.txt")
c1=$(val "$after" 'keyload_raft_committed_entries_total{}')
a1=$(val "$after" 'keyload_raft_appended_entries_total{}')
python3 -c "import sys; sys.exit(0 if float('$c1') - float('$c0') >= $N else 1)" &&
  ok "committed entries rose by >= N=$N ($c0 -> $c1)" || bad "committed entries $c0 -> $c1 (N=$N)"
python3 -c "import sys; sys.exit(0 if float('$a1') - float('$a0') >= $N else 1)" &&
  ok "appended entries rose by >= N ($a0 -> $a1)" || bad "appended entries $a0 -> $a1"
[ "$(jq -r '[.samples | to_entries[] | select(.key | startswith("keyload_raft_commit_latency_seconds_count"))][0].value' <<<"$after")" != 0.0 ] &&
  ok "commit latency histogram observed the leader's entries" || bad "commit latency count is 0"
all_refusals=""
# every member applies the same state: depth N and in flight K on all three (followers may lag)
for u in "$url1" "$url2" "$url3"; do
  good=0
  for _ in $(seq 1 20); do
    if [ "$u" = "$url3" ]; then p=$(scrape "$u" --token "$token" --raw "$work/m.txt"); else p=$(scrape "$u" --raw "$work/m.txt"); fi
    d=$(jq -r '[.samples | to_entries[] | select(.key | startswith("keyload_queue_depth_messages{")) | .value] | add' <<<"$p")
    f=$(jq -r '[.samples | to_entries[] | select(.key | startswith("keyload_queue_in_flight_messages{")) | .value] | add' <<<"$p")
    [ "$(jq -n "$d == $N and $f == $K")" = true ] && { good=1; break; }
    sleep 0.25
  done
  [ $good = 1 ] && ok "$u: queue depth $N and in flight $K" || bad "$u: depth $d in flight $f (want $N, $K)"
  refused=$(jq -c '[.samples | to_entries[] | select((.key | startswith("keyload_refusals_total{")) and .value > 0)]' <<<"$p")
  all_refusals="$all_refusals $refused"
  if [ ! -s "$work/m.txt" ] || grep -q "$marker\|metricsroot" "$work/m.txt"; then bad "$u: no scrape, or a body or the principal appears in it"; else ok "$u: no body or principal name in the scrape"; fi
  rm -f "$work/m.txt"
done
if [ ! -s "$work/leader.txt" ] || grep -q "$marker\|metricsroot" "$work/leader.txt"; then bad "leader scrape holds a body"; else ok "leader scrape holds no body, no principal"; fi

# ---- the coordinator's endpoint (its config's "metrics" key); idle without a principal
ccfg="$work/coordinator.json" cport=$((base + 6))
cat >"$ccfg" <<JSON
{"cluster_file":"$PWD/var/$name/cluster.json","database":"default/default",
 "transfer_coordinator_principal_id":null,"status_file":"$work/coord.status","metrics":"127.0.0.3:$cport"}
JSON
./bin/keyload-coordinator --config "$ccfg" >"$work/coord.log" 2>&1 &
cpid=$!
cs='{}'
for _ in $(seq 1 40); do
  cs=$(scrape "http://127.0.0.3:$cport/metrics" 2>/dev/null) && [ "$(jq -r .status <<<"$cs")" = 200 ] && break
  sleep 0.1
done
cmissing=""
for f in keyload_coordinator_dispatched_total keyload_coordinator_accepted_total keyload_coordinator_delivered_total \
         keyload_coordinator_retries_total keyload_coordinator_turns_in_flight keyload_coordinator_pending_seen \
         'keyload_coordinator_terminal_failures_total{code=PERMISSION_DENIED}'; do
  case $f in *'{'*) k=$f ;; *) k="$f{}" ;; esac
  [ "$(jq -r --arg k "$k" '.samples[$k] == 0' <<<"$cs")" = true ] || cmissing="$cmissing $f"
done
check "coordinator: /metrics parses with its counters at 0 (idle)${cmissing:+ (missing:$cmissing)}" [ -z "$cmissing" ]
kill -TERM "$cpid" 2>/dev/null
for _ in $(seq 1 100); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
jq '.metrics = "10.0.0.1:9400"' "$ccfg" >"$work/coord-bad.json"
out=$(timeout 20 ./bin/keyload-coordinator --config "$work/coord-bad.json" 2>&1)
grep -q metrics_token_file <<<"$out" && ok "coordinator: a non-loopback metrics address without a token file is refused" ||
  bad "coordinator non-loopback: $out"

grep -q 'code=NOT_FOUND,detail=queue' <<<"$all_refusals" &&
  ok "the enqueue to a missing queue is counted as a refusal by code and detail" || bad "refusals: $all_refusals"

# ---- transfers counted by the daemon (three partitions, one member each, the same ports)
kc down >/dev/null 2>&1
cfg3="$work/cluster3.json"
cat >"$cfg3" <<JSON
{"cluster":"${name}x","replica_count":1,"timers":{"tick_ms":50,"election_ms":800,"heartbeat_ms":150},
 "partitions":[
  {"id":0,"members":[{"id":1,"client":"tcp://127.0.0.1:$base","peer":"tcp://127.0.0.1:$((base + 3))","metrics":"127.0.0.1:$((base + 6))"}]},
  {"id":1,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 1))","peer":"tcp://127.0.0.1:$((base + 4))","metrics":"127.0.0.1:$((base + 7))"}]},
  {"id":2,"members":[{"id":1,"client":"tcp://127.0.0.1:$((base + 2))","peer":"tcp://127.0.0.1:$((base + 5))","metrics":"127.0.0.1:$((base + 8))"}]}]}
JSON
if ! timeout -k 5 60 deploy/keyload-cluster --config "$cfg3" up >/dev/null; then
  bad "three-partition cluster up"; tail -n 5 "var/${name}x"/*.log
else
  k3() { timeout -k 5 60 ./bin/keyload --cluster "var/${name}x/cluster.json" "$@"; }
  s1="http://127.0.0.1:$((base + 7))/metrics" s2="http://127.0.0.1:$((base + 8))/metrics"
  unset KEYLOAD_PRINCIPAL KEYLOAD_KEY
  k3 admin bootstrap --tenant default --database first --admin metricsroot --key-out "$keys/root3.key" >/dev/null ||
    bad "3p bootstrap"
  export KEYLOAD_PRINCIPAL=metricsroot KEYLOAD_KEY="$keys/root3.key"
  k3 database create >/dev/null || bad "3p database create"
  k3 queue create xsrc --partition 1 >/dev/null && k3 queue create xdst --partition 2 >/dev/null &&
    k3 queue create xfull --partition 2 --max-messages 1 >/dev/null || bad "3p queues"
  for perm in QueuePublish QueueInspect QueueConsume QueueAck; do
    k3 principal grant metricsroot "$perm" --queue 'x*' >/dev/null || bad "grant $perm"
  done
  p1a=$(scrape "$s1") p2a=$(scrape "$s2")
  fam=$(jq -r '[.families.keyload_transfers_created.type, .families.keyload_transfers_delivered.type,
                .families.keyload_transfers_failed.type, .families.keyload_transfers_pending.type] | join(",")' <<<"$p1a")
  check "transfer families: created, delivered, failed (counters), pending (gauge): $fam" [ "$fam" = counter,counter,counter,gauge ]
  codes=$(jq -r '[.samples | keys[] | select(startswith("keyload_transfers_failed_total{"))] | length' <<<"$p2a")
  check "failed_total has one series per status code, the closed set (12: $codes)" [ "$codes" = 12 ]
  x1=$(python3 -c 'import uuid; print(uuid.uuid4())') x2=$(python3 -c 'import uuid; print(uuid.uuid4())')
  k3 --json transfer create --source xsrc --id "$x1" --dest xdst --token-out "$work/i1.tok" "moved $marker" >/dev/null &&
    k3 --json transfer create --source xsrc --id "$x2" --dest xfull --token-out "$work/i2.tok" "stuck $marker" >/dev/null ||
    bad "transfer create"
  p1b=$(scrape "$s1")
  numeq() { [ "$(jq -n --arg a "$1" '($a | tonumber? // "none") == '"$2")" = true ]; }
  numeq "$(val "$p1b" 'keyload_transfers_pending{}')" 2 &&
    [ "$(jq -n "$(val "$p1b" 'keyload_transfers_created_total{}') - $(val "$p1a" 'keyload_transfers_created_total{}')")" = 2 ] &&
    ok "partition 1 after two creates: pending 2, created +2" ||
    bad "after creates: pending $(val "$p1b" 'keyload_transfers_pending{}') created $(val "$p1b" 'keyload_transfers_created_total{}')"
  k3 enqueue xfull filler >/dev/null || bad "fill xfull"
  k3 --json transfer accept --dest xdst --intent "@$work/i1.tok" >/dev/null &&
    k3 --json transfer receipt --dest xdst --source xsrc --id "$x1" --token-out "$work/r1.tok" >/dev/null &&
    k3 --json transfer complete --source xsrc --id "$x1" --receipt "@$work/r1.tok" >/dev/null || bad "deliver x1"
  out=$(k3 --json transfer accept --dest xfull --intent "@$work/i2.tok" 2>&1)
  [ "$(jq -r '.error.code' <<<"$out" 2>/dev/null)" = RESOURCE_EXHAUSTED ] || bad "accept into a full queue: $out"
  p1c=$(scrape "$s1" --raw "$work/p1.txt") p2c=$(scrape "$s2" --raw "$work/p2.txt")
  dd=$(jq -n "$(val "$p1c" 'keyload_transfers_delivered_total{}') - $(val "$p1a" 'keyload_transfers_delivered_total{}')")
  [ "$dd" = 1 ] && numeq "$(val "$p1c" 'keyload_transfers_pending{}')" 1 &&
    ok "partition 1 after the Complete: delivered +1, pending 1" ||
    bad "after complete: delivered +$dd pending $(val "$p1c" 'keyload_transfers_pending{}')"
  fd=$(jq -n "$(val "$p2c" 'keyload_transfers_failed_total{code=RESOURCE_EXHAUSTED}') - $(val "$p2a" 'keyload_transfers_failed_total{code=RESOURCE_EXHAUSTED}')")
  other=$(jq -r '[.samples | to_entries[] | select((.key | startswith("keyload_transfers_failed_total{")) and
                  (.key | contains("RESOURCE_EXHAUSTED") | not) and .value > 0)] | length' <<<"$p2c")
  [ "$fd" = 1 ] && [ "$other" = 0 ] && ok "partition 2 after the refused Accept: failed{code=RESOURCE_EXHAUSTED} +1, no other code" ||
    bad "failed by code: +$fd, others $other"
  numeq "$(val "$p1c" 'keyload_transfers_failed_total{code=RESOURCE_EXHAUSTED}')" 0 &&
    ok "the failure is counted where it committed (partition 2), not on partition 1" || bad "p1 failed: $(val "$p1c" 'keyload_transfers_failed_total{code=RESOURCE_EXHAUSTED}')"
  if grep -q "$marker" "$work/p1.txt" "$work/p2.txt"; then bad "a transfer body appears in a scrape"; else ok "no transfer body in the scrapes"; fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
