#!/bin/bash
# A/B of `mafka4 bench feed-lag` (defaults: 8 and 256 VPs, 2 physical partitions, 20 s of a saturated
# keyless producer each): A = OLD_TREE (9914b31: the read nodes decode every record to split it), B =
# NEW_TREE (the split without decoding, VP batches spanning physical batches). Both trees run this
# commit's benchmarks/feed_lag.py (the read nodes' CPU per fed MB).
# Each run on a fresh `mafka4 up` (3 write, 2 read nodes) of its own tree, started from a
# 1-minute load below 1.0; the cluster is stopped after. Per run: feed_lag-<round>-<side>.json and its log.
# Usage: run_ab.sh ROUNDS OUT_DIR  (FIRST_ROUND: the first round's number, default 1)
set -u
rounds=$1; out=$(realpath -m "$2")
old_tree=${OLD_TREE:-/work/wt-old}; new_tree=${NEW_TREE:-/work/wt-new}
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
mkdir -p "$out"
first=${FIRST_ROUND:-1}
for r in $(seq "$first" $((first + rounds - 1))); do
  for side in old new; do
    if [ $side = old ]; then tree=$old_tree; else tree=$new_tree; fi
    home=$(mktemp -d /work/scratch/s48/feedlag-XXXX)
    quiet
    (cd /tmp && export MAFKA4_HOME=$home PYTHONPATH=$tree && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli up \
       && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli bench feed-lag --output "$out/feed_lag-r$r-$side.json"; \
       rc=$?; python3 -m mafka4.cli down; exit $rc) > "$out/feed_lag-r$r-$side.log" 2>&1
    echo "round $r $side rc=$?"
  done
done
