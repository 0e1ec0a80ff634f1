#!/usr/bin/env bash
# Limits in one header (common/limits.h): (1) no other product header defines a limit
# (a KL_ macro whose name has _MAX, _MIN or _LIMIT) apart from the few listed below with
# their reason; (2) the header compiles alone, with its relations (_Static_assert) holding;
# (3) breaking a relation fails the compile, so the checks are live. "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAILED: $1"; }
# Left where they are: sizes derived from a format, and the coordinator's own settings.
allowed='^(KL_PEER_AUTH_MAX|KL_HELLO_SEEN_MAX|KL_COORD_[A-Z0-9_]*)$'
#   KL_PEER_AUTH_MAX   the handshake's encoded size, from the fields beside it
#   KL_HELLO_SEEN_MAX  sized together with the replay window defined beside it
#   KL_COORD_*         keyload-coordinator's configuration ranges (coordinator/config.h)

stray=$(grep -rnE '^[[:space:]]*#[[:space:]]*define[[:space:]]+KL_[A-Z0-9_]*(_MAX|_MIN|_LIMIT)(_[A-Z0-9]+)*[[:space:](]' \
          --include='*.h' daemon common client coordinator | grep -v '^common/limits.h:' |
        while IFS= read -r hit; do
          name=$(echo "$hit" | sed -E 's/^[^:]*:[0-9]+:[[:space:]]*#[[:space:]]*define[[:space:]]+([A-Z0-9_]+).*/\1/')
          [[ $name =~ $allowed ]] || echo "$hit"
        done)
[ -z "$stray" ] && ok "every limit is defined in common/limits.h" || bad "limits outside common/limits.h:
$stray"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '#include "common/limits.h"' > "$tmp/t.c"
if cc -std=c11 -Wall -Wextra -Werror -I. -fsyntax-only "$tmp/t.c" 2> "$tmp/err"; then
  ok "common/limits.h compiles alone and its relations hold"
else
  bad "common/limits.h: $(cat "$tmp/err")"
fi

# Each broken relation must stop the compile with its own message.
mkdir -p "$tmp/common"
while IFS='|' read -r macro value message; do
  sed -E "s/^#define $macro .*/#define $macro $value/" common/limits.h > "$tmp/common/limits.h"
  echo '#include "common/limits.h"' > "$tmp/b.c"
  if cc -std=c11 -I"$tmp" -fsyntax-only "$tmp/b.c" 2> "$tmp/err"; then
    bad "$macro $value compiled (the relation \"$message\" is not checked)"
  elif grep -qF "$message" "$tmp/err"; then
    ok "$macro $value refused: $message"
  else
    bad "$macro $value failed for another reason: $(head -3 "$tmp/err")"
  fi
done <<'EOF2'
KL_PARK_MAX|100|contexts left for batches and Hello
KL_CLUSTER_MAX_MEMBERS|11|a partition's members fit the Raft config
KL_DEFAULT_MAX_FRAME_BYTES|(1u << 20)|default frame holds a batch
KL_CATALOG_LEASE_MIN_MS|900|a lease outlives one tail's hold
KL_KEY_LIST_MAX|65|SDK key list and grant list agree
KL_SESSION_CLUSTER_MAX|200|session cluster bound is a cluster name
EOF2
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
