#!/usr/bin/env bash
# Installs KeyLoad's Debian packages (README "Dependencies"). Idempotent: installs only what is missing.
set -euo pipefail
pkgs=(libprotobuf-c-dev protobuf-c-compiler libnng-dev libsodium-dev librocksdb-dev libuv1-dev
      check libsubunit-dev pkg-config libjansson-dev clang libclang-rt-14-dev gcc make jq
      # the nemesis harness (tests/nemesis): clocks, one-way cuts, namespaces, disk images, FUSE
      faketime nftables iproute2 e2fsprogs fuse3 libfuse3-dev
      # the peers of `make peers` (tests/bench/peers): JetStream, a PostgreSQL outbox, the plot
      nats-server postgresql gnuplot-nox
      # the metrics test's parser (tests/cluster/metrics.sh): Prometheus' own text parser
      python3-prometheus-client)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
