#!/usr/bin/env bash
# Writes tests/golden/store-fixture-<commit>.tar.gz: the three stores the golden workload
# leaves (RocksDB directories p0, p1, p2) and requests.txt (each step's partition,
# principal, request and answer). Data directories are never committed otherwise; this
# fixture is the explicit exception, so that a later binary must open a store written by
# this one and answer every recorded command id byte for byte (check.sh replays it). Run it
# only on the commit it is named after; a new fixture is a new file, never a rewrite.
set -eu
cd "$(dirname "$0")/../.."
commit=$(git log -1 --format=%h -- daemon common proto)  # the code that wrote the stores
make --no-print-directory build/golden >/dev/null
work=$(mktemp -d /tmp/kl-golden-fixture.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/fixture"
./build/golden fixture "$work/fixture" 2>/dev/null
# RocksDB's info logs hold host names and paths, and the LOCK file is recreated at open.
find "$work/fixture" \( -name 'LOG*' -o -name LOCK \) -delete
out=tests/golden/store-fixture-$commit.tar.gz
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf - fixture | gzip -n -9 > "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)"
