#!/usr/bin/env bash
# Installs everything mafka4 needs on a fresh Debian machine (etcd server, Java for the
# Spark analysis, kcat for the Kafka listener's tests, Prometheus (and promtool) for the metrics'
# tests, the Python package with its test tools), then runs the demo on a
# throwaway local cluster. Pass --skip-demo to install only (CI does), and --with-redis to
# install Redis too (redis-server and the `redis` extra), which only `mafka4 bench
# redis-streams` uses (CI does, so that the bench's smoke test runs).
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
with_redis=0
packages=(etcd-server openjdk-17-jre-headless kcat prometheus)
extras="server,dev,analysis"
for option in "$@"; do
  case "$option" in
    --skip-demo) run_demo=0 ;;
    --with-redis) with_redis=1; packages+=(redis-server); extras+=",redis" ;;
    *) echo "setup.sh: unknown option $option (use --skip-demo, --with-redis)" >&2; exit 2 ;;
  esac
done
sudo=""
[[ "$(id -u)" -ne 0 ]] && sudo="sudo"

missing=0
[[ -x /usr/bin/etcd ]] && command -v java >/dev/null && command -v kcat >/dev/null && [[ -x /usr/bin/prometheus ]] \
  && command -v promtool >/dev/null || missing=1
if [[ $with_redis == 1 ]] && ! command -v redis-server >/dev/null; then missing=1; fi
if [[ $missing == 1 ]]; then
  # Installing etcd-server, prometheus (or redis-server) must not start Debian's own service on
  # its usual port: mafka4 starts its own etcd (the metrics test its own prometheus, the bench its
  # own redis-server) on a free loopback port. policy-rc.d 101 forbids service starts.
  created_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  [[ $created_policy == 1 ]] && $sudo rm -f /usr/sbin/policy-rc.d
fi

python3 -m pip install --quiet --disable-pip-version-check -e ".[$extras]"

if [[ $run_demo == 1 ]]; then
  mafka4 demo
fi
