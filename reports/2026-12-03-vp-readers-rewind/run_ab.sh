#!/bin/bash
# A/B of readers that detect a diverged VP log: A = 059d5a6 (a one-replica VP serves only what it
# fsynced), B = the merge of vp-divergence (a one-replica VP serves its unflushed tail; readers rewind
# after a power loss). Per round and side, from a 1-minute load below 1.0:
#   `mafka4 experiment scaling --modes mafka3,mafka4 --consumers 1,8 --settle-load 1.5` (read_replicas=1, the default),
#   its own cluster: experiments/r<round>-<side>/.
# Usage: run_ab.sh ROUNDS OUT_DIR   (A_TREE, B_TREE: the checkouts)
set -u
rounds=$1; out=$(realpath -m "$2")
a_tree=${A_TREE:-/work/wt/snap-a}; b_tree=${B_TREE:-/work/wt/snap-b}  # checkouts of 059d5a6 and f1c4ef4
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in a b; do
    if [ $side = a ]; then tree=$a_tree; else tree=$b_tree; fi
    quiet
    echo "round $r $side $(git -C $tree rev-parse --short HEAD) experiment start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && export PYTHONPATH=$tree RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 \
       && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli experiment scaling \
       --modes mafka3,mafka4 --consumers 1,8 --settle-load 1.5 --out "$out/experiments/r$r-$side") > "$out/experiment-r$r-$side.log" 2>&1
    echo "round $r $side experiment rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
