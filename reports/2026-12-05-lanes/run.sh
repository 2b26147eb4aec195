#!/usr/bin/env bash
# The lanes bench on a fresh local cluster (issue 40's "Measure"), then the fleet model's lanes sweep.
set -euo pipefail
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0
mafka4 up --write-nodes 2 --read-nodes 1
sleep 40  # a quiet machine before the first run
mafka4 bench lanes --repetitions 2 --output reports/2026-12-05-lanes/bench_lanes.json
mafka4 down
mafka4 fleet model --out results/fleet-lanes --topics 40000 --consumer-scales 1 4 --lanes-per-topic 0 10 100 \
  --lane-topics-share 0.1
