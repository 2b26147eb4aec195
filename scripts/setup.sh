#!/usr/bin/env bash
# Installs everything mafka4 needs on a fresh Debian machine (etcd server, Java for the
# Spark analysis, the Python package with its test tools), then runs the demo on a
# throwaway local cluster. Pass --skip-demo to install only (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
[[ "${1:-}" == "--skip-demo" ]] && run_demo=0
sudo=""
[[ "$(id -u)" -ne 0 ]] && sudo="sudo"

if [[ ! -x /usr/bin/etcd ]] || ! command -v java >/dev/null; then
  # Installing etcd-server must not start Debian's own etcd service on port 2379:
  # mafka4 starts its own etcd on a free loopback port. policy-rc.d 101 forbids service starts.
  created_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server openjdk-17-jre-headless >/dev/null
  [[ $created_policy == 1 ]] && $sudo rm -f /usr/sbin/policy-rc.d
fi

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev,analysis]'

if [[ $run_demo == 1 ]]; then
  mafka4 demo
fi
