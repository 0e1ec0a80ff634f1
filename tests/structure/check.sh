#!/usr/bin/env bash
# Structure check of the product code (daemon/ common/ client/ coordinator/).
#
#   tests/structure/check.sh [--strict] [--print-exceptions] [--print-graph] [--root DIR] [--obj DIR]
#                            [--allowed FILE] [--exceptions FILE] [--max-lines N]
#
# A module is a .h/.c pair named by its path stem without "daemon/" (daemon/repl/raft.c and
# raft.h are repl/raft; common/rpc.c is common/rpc). It reports:
#   (a) cycles of the include graph: module A includes a header of module B;
#   (b) cycles of the call graph: an object file's undefined symbols resolved to the module
#       whose object defines them (nm), so a local prototype cannot hide a dependency;
#   (c) functions over --max-lines (120) lines, found by a brace scanner (funclen.awk);
#   (d) edges of either graph that the allowed graph does not permit. The allowed graph is
#       the fenced block of docs/ARCHITECTURE.md that starts with a line ```deps, or
#       tests/structure/allowed.deps while that block does not exist: "A -> B" per line,
#       where a name is a module, a directory of modules or a glob ("client/cli/*").
# Report mode (the default) prints everything and exits 0. --strict exits 1 on any finding
# that tests/structure/exceptions.txt does not list, on an exception that no longer matches
# anything (delete it: the list only shrinks), and on a source file without a current
# object file. --print-exceptions prints the exception lines that would cover every new
# finding. --print-graph prints today's edges of both graphs, "A -> B" once each, sorted (the
# text of an allowed graph that permits exactly what the code does now) and exits.
# `make structure-test` runs it strict after building the objects.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
strict=0 print_exc=0 print_graph=0 obj="" allowed="" exceptions="" maxlen=120
while [ $# -gt 0 ]; do
  case $1 in
    --strict) strict=1 ;;
    --print-exceptions) print_exc=1 ;;
    --print-graph) print_graph=1 ;;
    --root) root=$(cd "$2" && pwd); shift ;;
    --obj) obj=$2; shift ;;
    --allowed) allowed=$2; shift ;;
    --exceptions) exceptions=$2; shift ;;
    --max-lines) maxlen=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")" && pwd)
cd "$root" || exit 2
obj=${obj:-build/obj}
exceptions=${exceptions:-tests/structure/exceptions.txt}
dirs=()
for d in daemon common client coordinator; do [ -d "$d" ] && dirs+=("$d"); done
[ ${#dirs[@]} -gt 0 ] || { echo "check.sh: no product directory under $root" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
find "${dirs[@]}" -name '*.[ch]' -type f | LC_ALL=C sort > "$tmp/files"


# The allowed graph: ARCHITECTURE.md's ```deps block once it exists, else allowed.deps.
allowed_src=$allowed
if [ -z "$allowed_src" ]; then
  if [ -f docs/ARCHITECTURE.md ] && grep -q '^```deps[[:space:]]*$' docs/ARCHITECTURE.md; then
    allowed_src=docs/ARCHITECTURE.md
  else
    allowed_src=tests/structure/allowed.deps
  fi
fi
{
  # A header named X_internal.h is module X's private half (it has no .c of its own).
  awk '{ sub(/^daemon\//, ""); sub(/\.[ch]$/, ""); sub(/_internal$/, ""); print "M", $0 }' "$tmp/files"

  # (a) include edges: #include "x" naming a product file (repository-relative, as the
  # code writes them, or relative to the including file).
  xargs awk -v list="$tmp/files" '
    function mod(f) { sub(/^daemon\//, "", f); sub(/\.[ch]$/, "", f); sub(/_internal$/, "", f); return f }
    BEGIN { while ((getline f < list) > 0) known[f] = 1 }
    /^[ \t]*#[ \t]*include[ \t]*"/ {
      inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
      dir = FILENAME; sub(/[^\/]*$/, "", dir)
      if (inc in known) t = inc; else if ((dir inc) in known) t = dir inc; else next
      if (mod(t) != mod(FILENAME)) print "E include", mod(FILENAME), mod(t), FILENAME ":" FNR
    }' < "$tmp/files"

  # (b) call edges from the object files. The example programs are built without object
  # files (each is one file against the SDK) and so have no call edges.
  : > "$tmp/objs"
  while read -r f; do
    case $f in *.c) ;; *) continue ;; esac
    o=$obj/${f%.c}.o
    if [ ! -f "$o" ]; then
      case $f in client/examples/*) ;; *) echo "N no object file $o for $f (build first: make all)" ;; esac
      continue
    fi
    [ "$f" -nt "$o" ] && echo "N object $o is older than $f (build first: make all)"
    echo "$o" >> "$tmp/objs"
  done < "$tmp/files"
  # nm -A prefixes each symbol with its object file: "build/obj/daemon/node.o: kl_x T 0 10".
  if [ -s "$tmp/objs" ]; then
    xargs nm -A -P < "$tmp/objs" | awk -v obj="$obj/" '
      { f = $1; sub(/:$/, "", f); f = substr(f, length(obj) + 1); sub(/^daemon\//, "", f); sub(/\.o$/, "", f) }
      $3 == "U" || $3 == "w" { print "U", f, $2; next }
      $3 ~ /^[TDBRVWGSCi]$/ { print "D", f, $2 }' > "$tmp/syms"
  else
    : > "$tmp/syms"
  fi
  # A symbol defined by several modules (main, in each program) resolves to none of them.
  awk '$1 == "D" { n[$3]++; def[$3] = $2; next }
       $1 == "U" { use[++k] = $2 " " $3 }
       END { for (i = 1; i <= k; i++) { split(use[i], u, " ")
               if (n[u[2]] == 1 && def[u[2]] != u[1]) print "E call", u[1], def[u[2]], u[2] } }' "$tmp/syms"

  # (c) function lengths.
  grep -v '\.h$' "$tmp/files" | xargs awk -f "$here/funclen.awk" | awk '{ print "F", $0 }'
  grep '\.h$' "$tmp/files" | xargs awk -f "$here/funclen.awk" | awk '{ print "F", $0 }'

  # (d) the allowed graph and the exceptions.
  if [ "$allowed_src" = docs/ARCHITECTURE.md ]; then
    awk '/^```deps[ \t]*$/ { on = 1; next } on && /^```/ { on = 0 } on { print "A", NR, $0 }' "$allowed_src"
  elif [ -f "$allowed_src" ]; then
    awk '{ print "A", NR, $0 }' "$allowed_src"
  else
    echo "N no allowed graph: neither a \`\`\`deps block in docs/ARCHITECTURE.md nor $allowed_src"
  fi
  [ -f "$exceptions" ] && awk '{ print "X", NR, $0 }' "$exceptions"
} > "$tmp/input"

if [ "$print_graph" = 1 ]; then
  awk '$1 == "E" { print $3 " -> " $4 }' "$tmp/input" | LC_ALL=C sort -u
  exit 0
fi

# Sizes, for the record (no check): the largest files, and assert() calls per thousand
# lines in each directory.
echo "== sizes: largest files (lines) =="
xargs wc -l < "$tmp/files" | grep -v ' total$' | sort -rn | head -5
echo "== assert() per 1000 lines, by directory =="
xargs awk '{ d = FILENAME; sub(/\/[^\/]*$/, "", d); lines[d]++ }
           /(^|[^_A-Za-z0-9])assert[ \t]*\(/ { asserts[d]++ }
           END { for (d in lines) printf "%-22s %6d lines %4d asserts %5.2f per 1000\n",
                                        d, lines[d], asserts[d], 1000 * asserts[d] / lines[d] }' \
  < "$tmp/files" | sort

awk -v strict="$strict" -v maxlen="$maxlen" -v allowed_src="$allowed_src" \
    -v exceptions_src="$exceptions" -v print_exceptions="$print_exc" \
    -f "$here/graph.awk" "$tmp/input"
