#!/usr/bin/env bash
# engine_layers.sh [OBJDIR]: the call graph between the engine's object files, read from
# their symbols (nm), so that a local prototype cannot hide a dependency an include check
# would miss. Prints one "A -> B" line per edge (A uses a symbol B defines) and exits 1
# when the graph has a cycle (tsort names it). OBJDIR defaults to build/obj/daemon/engine
# (`make all` builds it).
set -u
cd "$(dirname "$0")/../.."
dir=${1:-build/obj/daemon/engine}
ls "$dir"/*.o >/dev/null 2>&1 || { echo "engine_layers: no objects in $dir (run make all)"; exit 2; }
declare -A owner
for o in "$dir"/*.o; do
  m=$(basename "$o" .o)
  for s in $(nm --defined-only -g "$o" | awk '{print $3}'); do owner[$s]=$m; done
done
edges=$(for o in "$dir"/*.o; do
  m=$(basename "$o" .o)
  for s in $(nm -u "$o" | awk '{print $2}'); do
    d=${owner[$s]:-}
    [ -n "$d" ] && [ "$d" != "$m" ] && echo "$m -> $d"
  done
done | sort -u)
echo "$edges"
if ! echo "$edges" | awk '{print $1, $3}' | tsort >/dev/null 2>/tmp/engine_layers.$$; then
  echo "engine_layers: the engine's modules call each other in a cycle:"
  cat /tmp/engine_layers.$$
  rm -f /tmp/engine_layers.$$
  exit 1
fi
rm -f /tmp/engine_layers.$$
echo "engine_layers: no cycle"
