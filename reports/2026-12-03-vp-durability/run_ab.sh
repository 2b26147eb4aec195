#!/bin/bash
# A/B of this change: A = OLD_TREE (40d6df5: lone leaders fsync on the read node's event loop, a VP
# with one read replica serves its unflushed tail), B = NEW_TREE (db102d7: owed fsyncs batched on the
# worker thread; every lone leader, read_replicas=1 included, serves only what it fsynced).
# Per round and side, each from a 1-minute load below 1.0:
#   1. `mafka4 bench feed-lag` (8 and 256 VPs, read_replicas=2, 20 s of a saturated producer) on a
#      fresh `mafka4 up` of that tree, stopped after: feed_lag-r<round>-<side>.json;
#   2. `mafka4 experiment scaling --modes mafka4 --consumers 1,8` (read_replicas=1, the default: every
#      VP a lone leader in B), its own cluster: experiments/r<round>-<side>/.
# Usage: run_ab.sh ROUNDS OUT_DIR
set -u
rounds=$1; out=$(realpath -m "$2")
old_tree=${OLD_TREE:-/work/wt-old}; new_tree=${NEW_TREE:-/work/wt-rr1}
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    if [ $side = old ]; then tree=$old_tree; else tree=$new_tree; fi
    home=$(mktemp -d /tmp/m4feed-XXXX)
    quiet
    echo "round $r $side feed-lag start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && export MAFKA4_HOME=$home PYTHONPATH=$tree && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli up \
       && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli bench feed-lag --output "$out/feed_lag-r$r-$side.json"; \
       rc=$?; python3 -m mafka4.cli down; exit $rc) > "$out/feed_lag-r$r-$side.log" 2>&1
    echo "round $r $side feed-lag rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    quiet
    echo "round $r $side experiment start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && export PYTHONPATH=$tree && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli experiment scaling \
       --modes mafka4 --consumers 1,8 --out "$out/experiments/r$r-$side") > "$out/experiment-r$r-$side.log" 2>&1
    echo "round $r $side experiment rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
