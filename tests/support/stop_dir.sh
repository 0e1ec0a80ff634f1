# stop_dir.sh, sourced by the test and bench scripts that start members through
# deploy/keyload-cluster: stops every process whose pid a DIR/*.pid file names (the
# launcher's pid files), by pid, never by name.
#
#   gone PID            true once PID has ended (gone, or a zombie its parent has not reaped)
#   proc_id PID         "PID:STARTTIME", the process's identity, or nothing when none runs
#   ended ID            true once the process an ID from proc_id names has ended
#   stop_dir DIR [N]    SIGTERM to each, up to N x 50 ms (default 100: 5 s) for all to end,
#                       then SIGKILL to any left

gone() { ! kill -0 "$1" 2>/dev/null || [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ]; }

# starttime PID: the process's start time in clock ticks since boot (field 22 of its stat), or
# nothing when there is no such process.
starttime() { sed -n 's/^.*) [A-Za-z] \(.*\)$/\1/p' "/proc/$1/stat" 2>/dev/null | awk '{print $19}'; }
# A process is named by "pid:starttime": pid_max is often 32768, and once a process ends its
# pid can go to one of the many short-lived processes around the test, so "no process has
# this pid" is not a sound test of "that process ended".
#   proc_id PID   the process's identity, or nothing when there is no such process
#   ended ID      true once the process ID names has ended (or is a zombie); false for an
#                 empty ID, since a process never seen cannot be shown to have ended
proc_id() { local t; t=$(starttime "$1"); [ -n "$t" ] && echo "$1:$t"; }
ended() { [ -n "$1" ] && { gone "${1%%:*}" || [ "$(starttime "${1%%:*}")" != "${1#*:}" ]; }; }

stop_dir() {
  local f p pids=()
  for f in "$1"/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f" 2>/dev/null)
    [ -n "$p" ] && kill -TERM "$p" 2>/dev/null && pids+=("$p")
  done
  for _ in $(seq 1 "${2:-100}"); do
    local left=0
    for p in "${pids[@]}"; do gone "$p" || left=1; done
    [ $left -eq 0 ] && break
    sleep 0.05
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
