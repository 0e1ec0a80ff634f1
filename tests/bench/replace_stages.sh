#!/usr/bin/env bash
# replace_stages.sh: where a replace's write outage goes, from the daemons' logs.
#
#   tests/bench/replace_stages.sh T_CMD_MS LEADER_LOG NEW_LOG [OUTAGE_MS]
#
# T_CMD_MS: the wall-clock ms (epoch) at which `keyload-cluster replace` was run; the logs:
# the leader's and the new member's lines written since. Prints each stage the logs show, in
# ms after the command, and the time since the stage before: the change reaching the
# leader, the new member's start, the learner entry, the snapshot stream's start (after the
# reader's key count, open_ms), the last chunk staged, the stream's end on the leader, the
# install, the joint and the final configuration, the change's end and (OUTAGE_MS) the
# first acknowledged write. A stage missing from the logs is printed as "-".
set -u
t0=$1 lead=$2 new=$3 outage=${4:-}
# The first line of FILE matching RE, as ms since t0 ("-" when none).
at() {
  local ts
  ts=$(grep -m1 -E "$2" "$1" | sed -n 's/^ts=\([^ ]*\) .*/\1/p')
  if [ -z "$ts" ]; then echo -; return; fi
  echo $(( $(date -d "$ts" +%s%3N) - t0 ))
}
field() { grep -m1 -E "$2" "$1" | tr ' ' '\n' | sed -n "s/^$3=//p"; }
prev=0
row() {
  local d=-
  if [ "$2" != - ]; then d=$(( $2 - prev )); prev=$2; fi
  printf '  %-44s %7s ms  (+%s)\n' "$1" "$2" "$d"
}
# The files may be process substitutions: read each once.
L=$(mktemp) N=$(mktemp)
trap 'rm -f "$L" "$N"' EXIT
cat "$lead" >"$L"
cat "$new" >"$N"
echo "stages (ms after the replace command, +ms since the stage before):"
row "leader: member change started" "$(at "$L" 'msg="member change started"')"
row "new member: replication started" "$(at "$N" 'msg="replication started"')"
row "leader: learner entry in effect" "$(at "$L" 'msg="configuration in effect".* learners=[1-9]')"
row "new member: peer connected to the leader" "$(at "$N" 'msg="peer connected"')"
row "leader: snapshot stream started (open_ms=$(field "$L" 'msg="snapshot stream started"' open_ms))" \
    "$(at "$L" 'msg="snapshot stream started"')"
row "new member: snapshot staged (last chunk)" "$(at "$N" 'msg="snapshot staged"')"
row "leader: snapshot stream ended" "$(at "$L" 'msg="snapshot stream ended"')"
row "new member: snapshot installed (ms=$(field "$N" 'msg="snapshot installed"' ms))" \
    "$(at "$N" 'msg="snapshot installed"')"
row "leader: joint configuration in effect" "$(at "$L" 'msg="configuration in effect".* old=[1-9]')"
row "leader: final configuration in effect" "$(at "$L" 'msg="configuration in effect".* learners=0 old=0')"
row "leader: member change ended" "$(at "$L" 'msg="member change ended"')"
[ -n "$outage" ] && row "first acknowledged write (the outage)" "$outage"
exit 0
