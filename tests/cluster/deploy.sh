#!/usr/bin/env bash
# deploy/keyload-cluster end to end on a real RF3 cluster (3 partitions x 3 members, from
# deploy/local-rf3.json): key files and their modes, keys generated once and reused,
# members refusing a wrong or exposed key, a wiped member refused (the first-start marker),
# `status --json` (leaders, members up or not),
# kill, start, down; the coordinator: nothing without var/<name>/coordinator.json, and with
# it started by up/start/restart --cold, shown by status, stopped by kill/down (config with
# an administrator the test bootstraps). Its own cluster file and name, ports in
# 32000-32739 (below the ephemeral range); every process it starts is stopped on exit by pid
# file, never by name.
set -u
cd "$(dirname "$0")/../.." || exit 1
name="deploytest$$"
base=$(( 32000 + ($$ % 37) * 20 ))   # clients base..base+8, peers base+9..base+17
mkdir -p var
cfg=$(mktemp "$PWD/var/deploy-XXXXXX.json")
var="var/$name"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
quiet() { "$@" >/dev/null 2>&1; }
. tests/support/stop_dir.sh  # gone PID, proc_id PID, ended ID, stop_dir DIR

cleanup() {
  stop_dir "$var"
  rm -rf "$var" "$cfg"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

jq --arg name "$name" --argjson base "$base" '
  .cluster = $name
  | .partitions |= (to_entries | map(.key as $pi | .value
      | .members |= (to_entries | map(.key as $mi | .value
          | .client = "tcp://127.0.0.1:\($base + $pi * 3 + $mi)"
          | .peer = "tcp://127.0.0.1:\($base + 9 + $pi * 3 + $mi)"
          | .metrics = "127.0.0.2:\($base + $pi * 3 + $mi)"))))' deploy/local-rf3.json >"$cfg"
[ "$(jq '[.partitions[].members[]] | length' "$cfg")" = 9 ] || { echo "FAIL local-rf3.json has not 9 members"; echo "0 passed, 1 failed"; exit 1; }

kc() { timeout 60 deploy/keyload-cluster --config "$cfg" "$@"; }
mode_of() { stat -c %a "$1" 2>/dev/null; }
size_of() { stat -c %s "$1" 2>/dev/null; }
nodes=$(jq -r '.partitions[] | .id as $p | .members[] | "p\($p)m\(.id)"' "$cfg")
status_json() { kc status --json 2>/dev/null; }
# Polls status --json (up to 20 s) until the jq condition holds; keeps the last answer in $st.
wait_status() {
  local cond=$1
  for _ in $(seq 1 80); do
    st=$(status_json)
    [ "$(jq -r "$cond" <<<"$st" 2>/dev/null)" = true ] && return 0
    sleep 0.25
  done
  return 1
}
all_up='(.partitions | length) == 3 and all(.partitions[]; .leader != null and all(.members[]; .up and .state == "running"))'
keys_digest() { cat "$var/cluster.secret" "$var"/p*m*.key 2>/dev/null | sha256sum; }
pubs() { jq -c '[.partitions[].members[].public_key]' "$var/cluster.json" 2>/dev/null; }

# ---- first up: key files, modes, cluster.json
if ! kc up >/dev/null; then bad "cluster up"; echo "$passed passed, $failed failed"; exit 1; fi
ok "cluster up"
check "var dir is 0700" [ "$(mode_of "$var")" = 700 ]
check "cluster.secret is 0600, 32 bytes" [ "$(mode_of "$var/cluster.secret"):$(size_of "$var/cluster.secret")" = 600:32 ]
bad_keys=0
for n in $nodes; do
  [ "$(mode_of "$var/$n.key"):$(size_of "$var/$n.key")" = 600:64 ] || { bad_keys=1; echo "  $n.key: mode $(mode_of "$var/$n.key"), $(size_of "$var/$n.key") bytes"; }
done
check "9 member keys, each 0600 and 64 bytes" [ $bad_keys -eq 0 ]
check "cluster.json has 9 distinct public keys" \
  [ "$(jq '[.partitions[].members[].public_key | select(type == "string")] | unique | length' "$var/cluster.json" 2>/dev/null)" = 9 ]
lens=$(jq -r '.partitions[].members[].public_key' "$var/cluster.json" 2>/dev/null | while read -r k; do base64 -d <<<"$k" | wc -c; done | sort -u)
check "every public key is 32 bytes" [ "$lens" = 32 ]
check "p1m2's public key is recorded in p1m2.pub" \
  [ "$(cat "$var/p1m2.pub" 2>/dev/null)" = "$(jq -r '.partitions[1].members[1].public_key' "$var/cluster.json")" ]
digest1=$(keys_digest) pubs1=$(pubs)

# ---- status
if wait_status "$all_up"; then ok "status --json: 3 partitions, each with a leader, all 9 members up"
else bad "status --json never showed every leader and member: $(jq -c . <<<"$st" 2>/dev/null)"; fi
check "status --json carries term, commit and applied indexes and catalog version" \
  [ "$(jq -r 'all(.partitions[]; (.term | type) == "number" and (.commit_index | type) == "number" and (.applied_index | type) == "number" and (.catalog_version | type) == "number")' <<<"$st")" = true ]
check "status --json shows every member's metrics address (nodes and partitions)" \
  [ "$(jq -r '[.nodes[].metrics, .partitions[].members[].metrics] | map(select(startswith("127.0.0.2:"))) | length' <<<"$st")" = 18 ]
check "status --json keeps the pid-file list" [ "$(jq -r '[.nodes[] | select(.state == "running" and .pid != null)] | length' <<<"$st")" = 9 ]
human=$(kc status 2>&1)
check "status prints one line per partition" [ "$(grep -c '^partition [0-2]: leader p[0-2]m[1-3]' <<<"$human")" = 3 ]

# ---- no coordinator.json: no coordinator, and nothing else changes
check "without coordinator.json, up starts no coordinator (no pid file, no log)" \
  [ ! -e "$var/coordinator.pid" ] && [ ! -e "$var/coordinator.log" ]
check "status --json: coordinator not configured, stopped, no pid" \
  [ "$(jq -c '.coordinator | [.configured, .state, .pid, .status]' <<<"$st")" = '[false,"stopped",null,null]' ]
check "status --json keeps its keys (cluster, nodes, partitions) beside coordinator" \
  [ "$(jq -c 'keys' <<<"$st")" = '["cluster","coordinator","nodes","partitions"]' ]
check "status says the coordinator is not configured" grep -q '^coordinator: not configured' <<<"$human"
out=$(kc start coordinator 2>&1); rc=$?
check "start coordinator without its config fails, naming the file" \
  bash -c '[ "$1" -ne 0 ] && grep -q "coordinator.json" <<<"$0"' "$out" "$rc"
check "... and leaves no pid file" [ ! -e "$var/coordinator.pid" ]

# ---- kill one member
p1m2_id=$(proc_id "$(cat "$var/p1m2.pid" 2>/dev/null)")
kc kill p1m2 >/dev/null
if wait_status '[.partitions[1].members[] | select(.node == "p1m2") | .up == false and .state == "stopped"][0]'; then
  ok "after kill p1m2, status shows p1m2 not up and stopped"
else bad "p1m2 after kill: $(jq -c '.partitions[1].members[1]' <<<"$st")"; fi
check "the others stay up" [ "$(jq '[.partitions[].members[] | select(.up)] | length' <<<"$st")" = 8 ]
check "p1m2's process is gone" ended "$p1m2_id"

# ---- members refuse keys that are not theirs
hand() { # hand KEYFILE|"": keyloadd p1m2 started by hand (its pid file lets cleanup stop it
         # should it start); keeps its output in $out and its exit status in $hand_rc
  local key=(); [ -n "$1" ] && key=(--member-key "$1")
  out=$(timeout 20 ./bin/keyloadd --cluster "$var/cluster.json" --node p1m2 --var var \
          --cluster-secret "$var/cluster.secret" "${key[@]}" 2>&1 & echo $! >"$var/hand.pid"
        wait $!; r=$?; rm -f "$var/hand.pid"; exit $r)
  hand_rc=$?
}
hand "$var/p0m1.key"
check "another member's key: refused with exit 2" [ "$hand_rc" = 2 ]
check "the refusal names the member and the file" bash -c 'grep -q "p1m2" <<<"$0" && grep -q "p0m1.key" <<<"$0"' "$out"
hand ""
check "no --member-key while the cluster file has its public_key: refused" [ "$hand_rc" = 2 ]
install -m 0644 "$var/p1m2.key" "$var/exposed.key"
hand "$var/exposed.key"
check "a key file readable by others: refused, naming the mode" bash -c '[ "$1" = 2 ] && grep -q "0644" <<<"$0"' "$out" "$hand_rc"
rm -f "$var/exposed.key"
cp -p "$var/p1m2.key" "$var/p1m2.key.orig"
cp "$var/p2m3.key" "$var/p1m2.key"
out=$(kc start p1m2 2>&1); rc=$?
check "launcher start with a swapped key file fails" [ "$rc" -ne 0 ]
check "... saying whose key it is not" grep -q "does not belong to p1m2" <<<"$out"
mv "$var/p1m2.key.orig" "$var/p1m2.key"
check "start p1m2 with its own key" quiet kc start p1m2
check "status shows p1m2 up again" wait_status "$all_up"

# ---- a wiped member is refused: the launcher passes --init-store only on a first start
check "every member has its first-start marker outside its data directory" \
  [ "$(ls "$var"/p*m*.initialized 2>/dev/null | wc -l)" = 9 ]
quiet kc kill p1m2
mv "$var/p1m2" "$var/p1m2.saved"
out=$(kc start p1m2 2>&1); rc=$?
check "start of p1m2 with its data directory wiped fails" [ "$rc" -ne 0 ]
check "... explaining the wiped store and --init-store" bash -c 'grep -q "wiped" <<<"$0" && grep -q -- "--init-store" <<<"$0"' "$out"
check "... and creates no store there" [ ! -e "$var/p1m2/CURRENT" ]
rm -rf "$var/p1m2"
mv "$var/p1m2.saved" "$var/p1m2"
check "p1m2 starts again on its own directory (no --init-store)" quiet kc start p1m2
check "status shows p1m2 up after its directory came back" wait_status "$all_up"
leaked=0
for f in "$var/cluster.secret" "$var"/p*m*.key; do
  grep -rqF "$(base64 -w0 "$f")" "$var"/*.log && { leaked=1; echo "  $f appears in a log"; }
done
check "no key bytes in any log" [ $leaked -eq 0 ]

# ---- the coordinator, configured: an administrator bootstrapped here is its principal (the
# launcher only starts it; it never creates the principal or the config)
coord_pid() { cat "$var/coordinator.pid" 2>/dev/null; }
coord_up() { local p; p=$(coord_pid); [ -n "$p" ] && ! gone "$p"; }
write_coord_cfg() {  # [WORKERS]
  (umask 077; jq -n --arg c "$var/cluster.json" --arg k "$var/ops.key" --argjson w "${1:-2}" \
    '{cluster_file: $c, database: "deploy/db", transfer_coordinator_principal_id: "ops",
      principal_key_file: $k, flush_interval_ms: 100, workers: $w}' >"$var/coordinator.json")
}
check "admin bootstrap (the coordinator's principal ops)" quiet timeout 60 ./bin/keyload --cluster "$var/cluster.json" \
  admin bootstrap --tenant deploy --database db --admin ops --key-out "$var/ops.key" --cluster-secret "$var/cluster.secret"
write_coord_cfg
out=$(kc up 2>&1)
check "up with coordinator.json starts the coordinator" grep -q '^coordinator: started (pid [0-9]*)' <<<"$out"
check "... the members were already running" [ "$(grep -c ': already running' <<<"$out")" = 9 ]
c1=$(coord_pid); c1_id=$(proc_id "$c1")
check "coordinator.pid names a running process" coord_up
check "the coordinator logged that it starts discovery as ops" grep -q 'msg="starting".*principal=ops' "$var/coordinator.log"
if wait_status '.coordinator.state == "running" and .coordinator.status.discovery == "enabled"'; then
  ok "status --json: coordinator running, its snapshot says discovery enabled"
else bad "status --json coordinator: $(jq -c .coordinator <<<"$st" 2>/dev/null)"; fi
check "status --json: the coordinator's pid and config" \
  [ "$(jq -r '"\(.coordinator.pid) \(.coordinator.configured) \(.coordinator.status.config.principal_id)"' <<<"$st")" = "$c1 true ops" ]
check "status --json: members unchanged (9 running, 3 partitions)" \
  [ "$(jq '[.nodes[] | select(.state == "running")] | length' <<<"$st"):$(jq '.partitions | length' <<<"$st")" = 9:3 ]
human=$(kc status 2>&1)
check "status shows the coordinator running with its pid" grep -q "^coordinator: running (pid $c1)" <<<"$human"
check "up again leaves the running coordinator alone" \
  bash -c '[ "$(timeout 60 deploy/keyload-cluster --config "$0" up 2>&1 | grep -c "^coordinator: already running")" = 1 ]' "$cfg"
check "... same pid" [ "$(coord_pid)" = "$c1" ]
check "kill coordinator" quiet kc kill coordinator
killed_and_unfiled() { ended "$1" && [ ! -e "$var/coordinator.pid" ]; }
check "... its process is gone and its pid file removed" killed_and_unfiled "$c1_id"
check "status --json after kill: coordinator stopped" [ "$(status_json | jq -r .coordinator.state)" = stopped ]
cp "$var/coordinator.json" "$var/coordinator.json.good"
write_coord_cfg 0
out=$(kc start coordinator 2>&1); rc=$?
check "start coordinator with workers 0 fails, naming the key" bash -c '[ "$1" -ne 0 ] && grep -q "workers" <<<"$0"' "$out" "$rc"
check "... and leaves no pid file" [ ! -e "$var/coordinator.pid" ]
mv "$var/coordinator.json.good" "$var/coordinator.json"
check "start coordinator" quiet kc start coordinator
c2=$(coord_pid); c2_id=$(proc_id "$c2")
check "... a new coordinator process runs" bash -c '[ -n "$0" ] && [ "$0" != "$1" ] && kill -0 "$0"' "$c2" "$c1"

# ---- down, then up again: same keys
# A member is identified by its pid and its start time: pid_max is 32768 here, and during
# `down` a freed pid can go to one of the many short-lived processes around it.
member_ids=$(for f in "$var"/p*m*.pid; do proc_id "$(cat "$f" 2>/dev/null)"; done)
stops_before=$(grep -c 'msg="stopped"' "$var/coordinator.log" 2>/dev/null)
down_out=$(kc down 2>&1); down_rc=$?
check "down" [ $down_rc -eq 0 ]
still=0
for id in $member_ids; do
  p=${id%%:*}
  ended "$id" ||
    { still=1; echo "# pid $p still runs: $(ps -o pid=,stat=,wchan=,args= -p "$p")"; }
done
[ $still -eq 0 ] || printf '# down printed:\n%s\n' "$down_out"
check "down stopped every member" [ $still -eq 0 ]
if ended "$c2_id"; then ok "down stopped the coordinator (pid $c2 gone)"; else
  bad "down stopped the coordinator (pid $c2 gone)"
  echo "# pid $c2 (started at tick ${c2_id#*:}): $(ps -o pid=,stat=,lstart=,wchan=,args= -p "$c2")"
  printf '# down printed:\n%s\n# the coordinator log ends:\n' "$down_out"; tail -n 5 "$var/coordinator.log"
fi
# Its own stop, not an earlier one's: one more "stopped" line, and a final snapshot with its pid.
check "... with SIGTERM: it logged a clean stop and wrote a final snapshot" \
  bash -c '[ "$(grep -c "msg=\"stopped\"" "$0")" -gt "$2" ] &&
           [ "$(./bin/keyload-coordinator --status --config "$1" | jq -r "[.final, .pid] | map(tostring) | join(\" \")")" = "true $3" ]' \
  "$var/coordinator.log" "$var/coordinator.json" "$stops_before" "$c2"
check "down removed every pid file" [ -z "$(ls "$var"/*.pid 2>/dev/null)" ]
check "status after down: nothing running, nothing up" \
  [ "$(status_json | jq '[.partitions[].members[] | select(.up or .state == "running")] | length')" = 0 ]
check "second up" quiet kc up
check "second up reused the cluster secret and member keys" [ "$(keys_digest)" = "$digest1" ]
check "second up wrote the same public keys" [ "$(pubs)" = "$pubs1" ]
check "all up after the second up" wait_status "$all_up"
c3=$(coord_pid); c3_id=$(proc_id "$c3")
check "second up started the coordinator again" bash -c '[ -n "$0" ] && [ "$0" != "$1" ] && kill -0 "$0"' "$c3" "$c2"
check "restart --cold" quiet kc restart --cold
check "restart --cold kept the keys" [ "$(keys_digest):$(pubs)" = "$digest1:$pubs1" ]
check "all up after restart --cold" wait_status "$all_up"
c4=$(coord_pid); c4_id=$(proc_id "$c4")
check "restart --cold restarted the coordinator (old pid gone, new one runs)" \
  bash -c '[ -n "$0" ] && [ "$0" != "$1" ] && kill -0 "$0"' "$c4" "$c3"
check "... the old one is gone" ended "$c3_id"
check "status --json shows the restarted coordinator" wait_status ".coordinator.state == \"running\" and .coordinator.pid == $c4"
check "final down" quiet kc down
check "final down stopped the coordinator" ended "$c4_id"
check "no pid file left" [ -z "$(ls "$var"/*.pid 2>/dev/null)" ]
check "no key bytes of ops in the coordinator's log" bash -c '! grep -qF "$(base64 -w0 "$0")" "$1"' "$var/ops.key" "$var/coordinator.log"
check "the coordinator's log is 0600" [ "$(mode_of "$var/coordinator.log")" = 600 ]

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
