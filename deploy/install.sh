#!/usr/bin/env bash
# install.sh: what `make install` does (README "Deploying on several hosts"). Copies the
# programs, the systemd units (with the paths below written into them), the sysusers entry
# for the `keyload` user and a man page per program made from its --help text, all under
# DESTDIR (a staging root for packaging; empty for a real install).
#   PREFIX      /usr/local         programs in PREFIX/bin, man pages in PREFIX/share/man/man1
#   UNITDIR     PREFIX/lib/systemd/system
#   SYSCONFDIR  /etc/keyload       cluster file, cluster secret, member keys (the units read)
#   STATEDIR    /var/lib/keyload   member stores (the units write)
# It never creates keys, users or data directories and never overwrites a file in
# SYSCONFDIR: those belong to the operator (README).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PREFIX:=/usr/local}" "${DESTDIR:=}" "${SYSCONFDIR:=/etc/keyload}" "${STATEDIR:=/var/lib/keyload}"
: "${UNITDIR:=$PREFIX/lib/systemd/system}"
bindir=$PREFIX/bin
mandir=$PREFIX/share/man/man1
for v in PREFIX SYSCONFDIR STATEDIR UNITDIR; do
  case ${!v} in /*) ;; *) echo "install.sh: $v must be an absolute path (got '${!v}')" >&2; exit 2;; esac
  case ${!v} in *[[:space:]\"\'\$\\%]*) echo "install.sh: $v must not hold spaces, quotes, \$, \\ or %" >&2; exit 2;; esac
done
progs=(keyloadd keyload keyload-coordinator keyload-mcp)
for p in "${progs[@]}"; do
  [ -x "bin/$p" ] || { echo "install.sh: bin/$p is missing; run make first" >&2; exit 1; }
done

install -d "$DESTDIR$bindir" "$DESTDIR$UNITDIR" "$DESTDIR$mandir" "$DESTDIR$PREFIX/lib/sysusers.d"
for p in "${progs[@]}"; do install -m 0755 "bin/$p" "$DESTDIR$bindir/$p"; done

subst() {
  sed -e "s|@BINDIR@|$bindir|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" -e "s|@STATEDIR@|$STATEDIR|g" "$1"
}
for u in keyloadd@.service keyload-coordinator.service; do
  subst "deploy/systemd/$u.in" >"$DESTDIR$UNITDIR/$u"
  chmod 0644 "$DESTDIR$UNITDIR/$u"
done
subst deploy/systemd/keyload.sysusers.in >"$DESTDIR$PREFIX/lib/sysusers.d/keyload.conf"

# A man page per program: its --help text, verbatim, under the usual headings.
version=$(git describe --always --dirty 2>/dev/null || echo unknown)
for p in "${progs[@]}"; do
  help=$("bin/$p" --help 2>&1 || true)
  {
    echo ".TH $(echo "$p" | tr a-z A-Z) 1 \"$(date -u +%Y-%m-%d)\" \"KeyLoad $version\" \"KeyLoad\""
    echo ".SH NAME"
    echo "$p \\- $(case $p in
      keyloadd) echo "KeyLoad partition member daemon";;
      keyload) echo "KeyLoad command-line client";;
      keyload-coordinator) echo "KeyLoad remote queue transfer coordinator";;
      keyload-mcp) echo "KeyLoad Model Context Protocol server";;
    esac)"
    echo ".SH SYNOPSIS AND OPTIONS"
    echo ".nf"
    printf '%s\n' "$help" | sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\&'/"
    echo ".fi"
    echo ".SH SEE ALSO"
    echo "The README and docs/ARCHITECTURE.md of the KeyLoad source tree."
  } >"$DESTDIR$mandir/$p.1"
  chmod 0644 "$DESTDIR$mandir/$p.1"
done
echo "installed into ${DESTDIR:-/}: ${progs[*]} in $bindir, units in $UNITDIR, man pages in $mandir"
