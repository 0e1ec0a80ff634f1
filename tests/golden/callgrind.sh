#!/usr/bin/env bash
# Instruction counts of a fixed workload under valgrind's callgrind (Debian package valgrind):
# build/golden bench ROUNDS (the golden workload on three in-process partitions, then ROUNDS
# rounds of enqueue 4 / receive 4 / ack 4 on partition 2). Prints the total Ir and the
# inclusive Ir of the node's entry points (kl_node_submit_batch, kl_node_apply: evaluation,
# encoding and the store's apply, without the log's fsync), and compares both with
# tests/golden/callgrind.baseline: a WARNING beyond 3% either way. Instruction counts do not
# depend on the machine's load, unlike timings; RocksDB's background threads add a little
# noise (see the baseline's spread). Not part of make test (about a minute).
#   tests/golden/callgrind.sh            measure and compare
#   tests/golden/callgrind.sh --record   measure and rewrite the baseline (reviewed like code)
#   CALLGRIND_BASELINE=FILE, ROUNDS=N     another baseline file, another round count
set -eu
cd "$(dirname "$0")/../.."
baseline=${CALLGRIND_BASELINE:-tests/golden/callgrind.baseline}
rounds=$(awk '$1 == "rounds" {print $2}' "$baseline" 2>/dev/null || true)
rounds=${ROUNDS:-${rounds:-200}}
command -v valgrind >/dev/null || { echo "callgrind: valgrind is missing (apt-get install valgrind)"; exit 2; }
make --no-print-directory build/golden >/dev/null
work=$(mktemp -d /tmp/kl-callgrind.XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" ./build/golden bench "$rounds" >/dev/null 2>"$work/vg.log" ||
  { tail -n 20 "$work/vg.log"; echo "callgrind: the workload failed"; exit 1; }
took=$(( $(date +%s) - start ))
total=$(awk '$1 == "totals:" {print $2}' "$work/cg.out")
callgrind_annotate --inclusive=yes "$work/cg.out" > "$work/ann.txt" 2>/dev/null
incl() { grep -E ":$1 \[" "$work/ann.txt" | head -n 1 | awk '{gsub(",", "", $1); print $1}'; }
submit=$(incl kl_node_submit_batch); apply=$(incl kl_node_apply)
node=$(( ${submit:-0} + ${apply:-0} ))
# A renamed entry point would silently drop out of the node figure: say so instead.
[ -n "$submit" ] || echo "  WARNING: kl_node_submit_batch is not in the profile (renamed?); node Ir is incomplete"
[ -n "$apply" ] || echo "  WARNING: kl_node_apply is not in the profile (renamed?); node Ir is incomplete"
echo "callgrind: build/golden bench $rounds in ${took}s under valgrind"
echo "  total Ir   $total"
echo "  node Ir    $node (kl_node_submit_batch ${submit:-0} + kl_node_apply ${apply:-0})"
if [ "${1:-}" = "--record" ]; then
  {
    echo "# tests/golden/callgrind.sh: valgrind --tool=callgrind build/golden bench $rounds"
    echo "# recorded on commit $(git rev-parse --short=7 HEAD) (daemon/ common/ proto/ as of $(git log -1 --format=%h -- daemon common proto)), $(valgrind --version), $(gcc --version | head -n 1), CFLAGS -O2"
    echo "rounds $rounds"
    echo "total_ir $total"
    echo "node_ir $node"
  } > "$baseline"
  echo "callgrind: baseline written to $baseline"; exit 0
fi
[ -f "$baseline" ] || { echo "callgrind: no $baseline (run with --record)"; exit 2; }
warn=0
for k in total node; do
  now=$([ $k = total ] && echo "$total" || echo "$node")
  base=$(awk -v k="${k}_ir" '$1 == k {print $2}' "$baseline")
  pct=$(awk -v a="$now" -v b="$base" 'BEGIN {printf "%+.2f", (a - b) * 100 / b}')
  if awk -v p="$pct" 'BEGIN {exit !(p > 3 || p < -3)}'; then
    echo "  WARNING: $k Ir $now is $pct% from the baseline $base (more than 3%)"; warn=1
  else
    echo "  $k Ir within 3% of the baseline $base ($pct%)"
  fi
done
[ "$warn" -eq 0 ] && echo "callgrind: within 3% of $baseline" || echo "callgrind: WARNING: beyond 3% of $baseline"
