#!/usr/bin/env bash
# Process tests: real keyloadd processes on loopback (build/proc-test), then the CLI
# end to end (tests/cluster/cli.sh), then the launcher on an RF3 cluster
# (tests/cluster/deploy.sh), its replace of members (replace.sh, replace_trust.sh), Prometheus metrics (tests/cluster/metrics.sh), where a follower's log writes run (slow_follower.sh), backup and restore
# (tests/cluster/backup.sh), then `make install` and the systemd units' start lines
# (tests/cluster/install.sh), and three hosts in network namespaces started from the
# installed units (tests/cluster/hosts.sh). Work directories live under var/ and /tmp and are removed (the proc-test one is kept when a test failed).
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d "$PWD/var/proctest.XXXXXX" 2>/dev/null || { mkdir -p var && mktemp -d "$PWD/var/proctest.XXXXXX"; })
# The daemons' and coordinators' logs explain a failure: kept then, removed after a pass.
trap 'if [ "${rc:-1}" -eq 0 ]; then rm -rf "$work"; else echo "process tests: logs kept in $work"; fi' EXIT
rc=0
./build/proc-test --bin "$PWD/bin/keyloadd" --work "$work" || rc=1
if [ $rc -ne 0 ]; then
  echo "--- last daemon log lines ---"; tail -n 30 "$work/daemon.log" 2>/dev/null
fi
if [ -f tests/cluster/cli.sh ]; then
  bash tests/cluster/cli.sh || rc=1
fi
bash tests/cluster/deploy.sh || rc=1   # the launcher on RF3: keys, status, kill, down
bash tests/cluster/replace.sh || rc=1  # the launcher's replace of a killed member under writes
bash tests/cluster/replace_trust.sh || rc=1  # every member of partitions 1 and 0 replaced, no restart for keys
bash tests/cluster/metrics.sh || rc=1  # /metrics of an RF3 partition and the coordinator, parsed
bash tests/cluster/slow_follower.sh || rc=1  # a follower's log writes on its loop, and off it when its disk is slow
bash tests/cluster/backup.sh || rc=1   # backup under load with transfers, damaged/truncated refused, restore
bash tests/cluster/install.sh || rc=1  # make install, systemd units, --wait-ready
bash tests/cluster/hosts.sh || rc=1    # three hosts in network namespaces, from the units
exit $rc
