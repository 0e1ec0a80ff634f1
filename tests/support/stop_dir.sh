# stop_dir.sh, sourced by the test and bench scripts that start members through
# deploy/keyload-cluster: stops every process whose pid a DIR/*.pid file names (the
# launcher's pid files), by pid, never by name.
#
#   gone PID            true once PID has ended (gone, or a zombie its parent has not reaped)
#   stop_dir DIR [N]    SIGTERM to each, up to N x 50 ms (default 100: 5 s) for all to end,
#                       then SIGKILL to any left

gone() { ! kill -0 "$1" 2>/dev/null || [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ]; }

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
