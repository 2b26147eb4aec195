#!/usr/bin/env bash
# The scaling experiment's lanes dimension (issue 40, item 6): 2 consumers, 1, 10 and 100 lanes at
# 1,000 msgs/s in total, 2 repetitions with the modes taking turns; Mafka3 stops at 10 lanes (its
# 100-lane point would take 404 replica actors). Then the Spark report, whose tables and report.md
# are kept here (the event logs stay in results/, too large for the repository).
set -euo pipefail
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0
here=reports/2026-12-05-lanes-experiment
uptime
mafka4 experiment scaling --consumers 2 --lanes 1,10,100 --repetitions 2 --duration-s 20 --settle-load 1.5 \
  --experiment-id lanes --out results/lanes-experiment
mafka4 analyze results/lanes-experiment --out "$here/analysis"
cp results/lanes-experiment/lanes/settings.json results/lanes-experiment/lanes/runs.jsonl "$here/"
uptime
