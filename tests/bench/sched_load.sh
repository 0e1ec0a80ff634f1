#!/usr/bin/env bash
# sched_load.sh: how much of a span the machine's threads spent running and how much they
# spent runnable but waiting for a CPU, from every thread's /proc/PID/task/TID/schedstat
# (run ns, run-queue wait ns, time slices; the kernel keeps these without CONFIG_SCHEDSTATS).
# A cell whose threads wait about as long as they run is short of CPU, not of disk or
# network: more in flight then buys throughput only at the price of latency.
#
#   sched_load.sh snap FILE                  every live thread's counters into FILE
#   sched_load.sh report BEFORE AFTER SECS [PREFIX]
#       one line: busy CPUs, runnable-waiting CPU-equivalents, switches/s, and the three
#       threads that waited most (pid/comm), over the SECS between the two snapshots.
#       Threads that started or ended between them are left out of both counts.
#   sched_load.sh window DELAY SECS OUT [PREFIX]
#       sleeps DELAY seconds, snapshots, sleeps SECS, snapshots again and writes the report
#       to OUT (run it in the background beside a bench cell, so the cell's own client is
#       alive at both snapshots and counted).
# Reads /proc only. Writes FILE and FILE.cpu (snap), or OUT and a scratch OUT.snap/ it
# removes again (window). Prints "not available" where schedstat is missing.
set -u

snap() {
  local out=$1 t s c
  : >"$out" || return 1
  for t in /proc/[0-9]*/task/[0-9]*; do
    read -r s 2>/dev/null <"$t/schedstat" || continue
    read -r c 2>/dev/null <"$t/comm" || c="?"
    local p=${t#/proc/}
    echo "${p%%/*}/${t##*/} ${c// /_} $s"
  done >>"$out"
  # The machine as a whole (jiffies): user nice system idle iowait irq softirq steal.
  read -r c s <"/proc/stat" && echo "$c $s" >"$out.cpu"
}

report() {
  local before=$1 after=$2 secs=$3 prefix=${4:-bench: cell scheduling:}
  if [ ! -s "$before" ] || [ ! -s "$after" ]; then
    echo "$prefix not available (no /proc/PID/task/TID/schedstat)"
    return 0
  fi
  # One collation for sort and join, whatever the caller's locale.
  LC_ALL=C join <(LC_ALL=C sort "$before") <(LC_ALL=C sort "$after") | awk -v secs="$secs" -v prefix="$prefix" '
    # key comm run wait slices comm run wait slices
    { run = $7 - $3; wait = $8 - $4; sl = $9 - $5
      if (run < 0 || wait < 0) next
      R += run; W += wait; S += sl
      w[$1 " " $2] = wait }
    END {
      n = 0
      for (k in w) { n++; key[n] = k }
      # three largest waits, by selection (a few hundred threads)
      top = ""
      for (i = 1; i <= 3 && i <= n; i++) {
        best = i
        for (j = i + 1; j <= n; j++) if (w[key[j]] > w[key[best]]) best = j
        t = key[i]; key[i] = key[best]; key[best] = t
        split(key[i], kc, " "); split(kc[1], pt, "/")
        top = top sprintf(" %s/%s %.0f%%", pt[1], kc[2], 100 * w[key[i]] / (secs * 1e9))
      }
      printf "%s threads_running_cpus=%.2f runnable_waiting_cpus=%.2f switches_per_s=%.0f seconds=%.1f most_waiting:%s",
             prefix, R / (secs * 1e9), W / (secs * 1e9), S / secs, secs, top
    }'
  # The machine's own split of the same span, from /proc/stat: where the CPU time went that
  # no thread was charged with (interrupts, a hypervisor's steal).
  if [ -s "$before.cpu" ] && [ -s "$after.cpu" ]; then
    paste -d' ' "$before.cpu" "$after.cpu" | awk '{
      n = (NF - 2) / 2
      for (i = 2; i <= n + 1; i++) d[i - 1] = $(i + n + 1) - $i
      tot = 0; for (i = 1; i <= n; i++) tot += d[i]
      if (tot <= 0) { printf "\n"; exit }
      printf " machine: user %.0f%% system %.0f%% irq %.0f%% idle %.0f%% iowait %.0f%% steal %.0f%%\n",
             100 * (d[1] + d[2]) / tot, 100 * d[3] / tot, 100 * (d[6] + d[7]) / tot, 100 * d[4] / tot,
             100 * d[5] / tot, 100 * d[8] / tot }'
  else
    echo
  fi
}

window() {
  local delay=$1 secs=$2 out=$3 prefix=$4 dir t0 t1
  dir=$out.snap   # beside OUT, so whoever removes OUT's directory removes it too
  mkdir -p "$dir" || return 1
  sleep "$delay"
  t0=$(date +%s.%N)
  snap "$dir/before"
  sleep "$secs"
  snap "$dir/after"
  t1=$(date +%s.%N)
  report "$dir/before" "$dir/after" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$prefix" >"$out"
  rm -rf "$dir"
}

case ${1:-} in
snap) [ $# -eq 2 ] || { echo "usage: sched_load.sh snap FILE" >&2; exit 2; }; snap "$2" ;;
report) [ $# -ge 4 ] || { echo "usage: sched_load.sh report BEFORE AFTER SECS [PREFIX]" >&2; exit 2; }; report "$2" "$3" "$4" "${5:-bench: cell scheduling:}" ;;
window) [ $# -ge 4 ] || { echo "usage: sched_load.sh window DELAY SECS OUT [PREFIX]" >&2; exit 2; }; window "$2" "$3" "$4" "${5:-bench: cell scheduling:}" ;;
*) echo "usage: sched_load.sh snap FILE | report BEFORE AFTER SECS [PREFIX] | window DELAY SECS OUT [PREFIX]" >&2; exit 2 ;;
esac
