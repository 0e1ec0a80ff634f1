#!/usr/bin/env bash
# Self-test of tests/structure/check.sh on a made-up tree with one finding of each kind:
# an include cycle, a call cycle that only nm can see (local prototypes, no #include), a
# function of exactly 130 lines with braces inside strings, characters and comments, and
# an edge outside the allowed graph. Each must be reported, make --strict fail, and be
# let through by a matching exception; a stale exception and a missing object file must
# fail --strict. Prints "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAILED: $1"; }

t=$tmp/tree
mkdir -p "$t/daemon" "$t/common" "$t/tests/structure" "$t/obj"
cat > "$t/daemon/a.h" <<'EOF'
#pragma once
#include "daemon/b.h"
int a_fn(void);
EOF
cat > "$t/daemon/b.h" <<'EOF'
#pragma once
#include "daemon/a.h"
int b_fn(void);
EOF
printf '#include "daemon/a.h"\nint a_fn(void) { return b_fn(); }\n' > "$t/daemon/a.c"
printf '#include "daemon/b.h"\nint b_fn(void) { return 1; }\n' > "$t/daemon/b.c"
printf 'int d_fn(void);\nint c_fn(void) { return d_fn(); }\n' > "$t/daemon/c.c"
printf 'int c_fn(void);\nint d_fn(int x);\nint d_fn(int x) { return x ? c_fn() : 0; }\n' > "$t/daemon/d.c"
{
  echo 'int long_fn(int x)'
  echo '{'
  echo '    const char *s = "}}"; char c = '"'}'"'; /* } */ // }'
  for i in $(seq 1 125); do echo "    x += $i;"; done
  echo '    return x + (int)s[0] + c;'
  echo '}'
  echo 'static const int table[] = { 1, 2 };'
  echo 'int short_fn(void) { return table[0]; }'
} > "$t/common/long.c"
for f in daemon/a daemon/b daemon/c daemon/d common/long; do
  mkdir -p "$t/obj/$(dirname "$f")"
  cc -std=c11 -I"$t" -c "$t/$f.c" -o "$t/obj/$f.o" || { echo "FAILED: cannot compile $f.c"; exit 1; }
done
echo 'a -> b' > "$t/tests/structure/allowed.deps"
: > "$t/tests/structure/exceptions.txt"

run() { bash "$here/check.sh" --root "$t" --obj "$t/obj" "$@" > "$tmp/out" 2>&1; }
has() { grep -qF -- "$1" "$tmp/out"; }

run; rc=$?
[ $rc -eq 0 ] && ok "report mode exits 0 with findings" || bad "report mode exit $rc"
has 'cycle include {a b}' && ok "include cycle a <-> b" || bad "include cycle not reported"
has 'cycle call {c d}' && ok "call cycle through local prototypes (nm)" || bad "call cycle not reported"
has 'cycle include {c d}' && bad "c <-> d reported as an include cycle" || ok "c <-> d is no include cycle"
has ' 130 common/long.c:1 long_fn' && ok "long_fn measured 130 lines" || bad "long_fn not measured as 130 lines"
has 'short_fn' && bad "short function reported" || ok "only functions over 120 lines reported"
has 'edge c -> d' && has 'edge b -> a' && ok "edges outside the allowed graph" || bad "disallowed edges not reported"
has 'edge a -> b' && bad "allowed edge a -> b reported" || ok "allowed edge not reported"

run --strict; rc=$?
[ $rc -eq 1 ] && has '2 passed, 4 failed' && ok "strict fails on new findings" || bad "strict exit $rc: $(tail -1 "$tmp/out")"

cat > "$t/tests/structure/exceptions.txt" <<'EOF'
# every finding of the made-up tree
cycle include a b
cycle call c d x
long common/long.c long_fn
edge b -> a
edge c -> d
edge d -> c
EOF
run --strict; rc=$?
[ $rc -eq 0 ] && has '6 passed, 0 failed' && has '[excepted: ' && ok "exceptions let every finding pass" || bad "strict with exceptions exit $rc"

echo 'edge a -> c' >> "$t/tests/structure/exceptions.txt"
run --strict; rc=$?
[ $rc -eq 1 ] && has 'stale: ' && ok "a stale exception fails strict" || bad "stale exception exit $rc"
sed -i '$d' "$t/tests/structure/exceptions.txt"

echo 'not an edge' >> "$t/tests/structure/allowed.deps"
run --strict; rc=$?
[ $rc -eq 1 ] && has 'bad line: ' && ok "an unreadable allowed-graph line fails strict" || bad "bad allowed line exit $rc"
echo 'a -> b' > "$t/tests/structure/allowed.deps"

mkdir -p "$t/docs"
printf '# Doc\n\n```deps\na -> b\nb -> a\nc -> d\nd -> c\n```\n\n```c\nc -> a\n```\n' > "$t/docs/ARCHITECTURE.md"
run; has 'allowed graph (docs/ARCHITECTURE.md, 4 edges)' && ! grep -q "^edge c -> d" "$tmp/out" && ok "ARCHITECTURE.md's deps block replaces allowed.deps" || bad "deps block not read"
rm -r "$t/docs"

rm "$t/obj/daemon/d.o"
run --strict; rc=$?
[ $rc -eq 1 ] && has 'no object file' && ok "a missing object file fails strict" || bad "missing object exit $rc"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
