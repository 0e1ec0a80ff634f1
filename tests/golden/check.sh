#!/usr/bin/env bash
# make golden-test: regenerates the golden vectors with this tree's code and compares them
# byte for byte with the checked-in ones (tests/golden/vectors), printing the first
# difference of each file; then opens the checked-in store fixture written by an older
# binary and replays every command id it recorded, in process and through a real
# bin/keyloadd (tests/golden/README.md).
#   --update   rewrites tests/golden/vectors (only for a deliberate, reviewed format change)
set -u
cd "$(dirname "$0")/../.."
vec=tests/golden/vectors
fixture=tests/golden/store-fixture-1e56d67.tar.gz
work=$(mktemp -d /tmp/kl-golden-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/out"
if ! ./build/golden vectors "$work/out" 2>"$work/gen.log"; then
  cat "$work/gen.log"; echo "golden: the generator failed"; echo "0 passed, 1 failed"; exit 1
fi
if [ "${1:-}" = "--update" ]; then
  rm -f "$vec"/*; cp "$work/out"/* "$vec"/; echo "golden: vectors rewritten in $vec"; exit 0
fi
passed=0 failed=0
# Prints the first differing line of two files: line and column, and 160 characters of
# both lines from a little before that column.
first_diff() {
  awk -v want="$1" 'BEGIN { while ((getline w < want) > 0) W[++n] = w }
       function show(l, a, b,   c, s) {
         for (c = 1; c <= length(a) && substr(a, c, 1) == substr(b, c, 1); c++) ;
         s = c > 40 ? c - 40 : 1
         printf "  line %d, column %d\n  want: ...%s\n  got:  ...%s\n", l, c, substr(a, s, 160), substr(b, s, 160)
       }
       { if (NR > n || $0 != W[NR]) { show(NR, W[NR], $0); found = 1; exit } }
       END { if (!found && NR < n) show(NR + 1, W[NR + 1], "(end of file)") }' "$2"
}
for f in $(ls "$vec" "$work/out" | grep -v ':$' | sort -u); do
  if [ ! -f "$vec/$f" ] || [ ! -f "$work/out/$f" ]; then
    echo "FAIL golden $f: present in only one of $vec and the regenerated vectors"; failed=$((failed + 1)); continue
  fi
  if cmp -s "$vec/$f" "$work/out/$f"; then
    echo "ok   golden $f ($(wc -l < "$vec/$f") lines)"; passed=$((passed + 1))
  else
    echo "FAIL golden $f differs from $vec/$f (first difference):"; first_diff "$vec/$f" "$work/out/$f"
    failed=$((failed + 1))
  fi
done
# A follower applies the stored entries (decoding them); the leader applied the write-sets it
# kept. Both must leave the same bytes.
for p in 0 1 2; do
  if cmp -s "$work/out/p$p.state" "$work/out/p$p.follower.state"; then
    echo "ok   golden p$p follower state equals the leader's"; passed=$((passed + 1))
  else
    echo "FAIL golden p$p: a follower's state differs from the leader's (first difference):"
    first_diff "$work/out/p$p.state" "$work/out/p$p.follower.state"; failed=$((failed + 1))
  fi
done
mkdir -p "$work/store"
if tar -xzf "$fixture" -C "$work/store" && ./build/golden replay "$work/store/fixture" 2>"$work/replay.log"; then
  echo "ok   replay of $fixture"; passed=$((passed + 1))
else
  grep -v 'msg="write path costs"' "$work/replay.log" | tail -n 5
  echo "FAIL replay of $fixture"; failed=$((failed + 1))
fi
daemon_fixture=tests/golden/daemon-store-fixture-1e56d67.tar.gz
if bash tests/golden/daemon-fixture.sh replay "$daemon_fixture"; then
  echo "ok   replay of $daemon_fixture by bin/keyloadd"; passed=$((passed + 1))
else
  echo "FAIL replay of $daemon_fixture by bin/keyloadd"; failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
