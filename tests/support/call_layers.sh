#!/usr/bin/env bash
# call_layers.sh OBJDIR GROUP...: no call cycle between the files of each group. A group is a
# shell glob of object files (e.g. 'daemon/rpc/*.o'); an edge A -> B is A calling a function
# B defines, read from the objects' symbols (nm), so a local prototype cannot hide a call
# that an include check would miss. tsort refuses a graph with a cycle and names its files.
# Exit 0: every group is acyclic; 1: a cycle (printed); 2: usage or no objects.
set -u
objdir=${1:?usage: call_layers.sh OBJDIR GROUP...}
shift
[ $# -gt 0 ] || { echo "call_layers: no group given" >&2; exit 2; }
rc=0 passed=0 failed=0
for group in "$@"; do
  # shellcheck disable=SC2206
  objs=( $objdir/$group )
  [ -e "${objs[0]}" ] || { echo "call_layers: no objects match $objdir/$group" >&2; exit 2; }
  # "D sym file" for each function a file defines, "U sym file" for each symbol it uses
  edges=$(for o in "${objs[@]}"; do
            f=$(basename "$o" .o)
            nm "$o" | awk -v f="$f" '$2 == "T" {print "D", $3, f} $1 == "U" {print "U", $2, f}'
          done | awk '$1 == "D" {def[$2] = $3; next} {use[n++] = $2 " " $3}
                      END {for (i = 0; i < n; i++) {split(use[i], u, " ");
                             if ((u[1] in def) && def[u[1]] != u[2]) print u[2], def[u[1]]}}' | sort -u)
  if ! out=$( { printf '%s\n' "$edges" | tsort >/dev/null; } 2>&1 ); then
    echo "FAIL call cycle in $group:"
    printf '%s\n' "$out" | sed 's/^/  /'
    rc=1 failed=$((failed + 1))
  else
    echo "ok   no call cycle in $group ($(printf '%s\n' "$edges" | grep -c .) edges)"
    passed=$((passed + 1))
  fi
done
echo "$passed passed, $failed failed"
exit $rc
