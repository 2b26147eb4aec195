#!/bin/bash
# A B A B: `experiment scaling --modes mafka4 --consumers 1,32` with the old harness (A, the
# driver collects every poll while it produces) and the new (B, members report after production).
# Only simulations/ differs between the trees; each side's interpreters import from its tree.
# Environment: A_TREE, B_TREE (the two checkouts), OUT (default: this directory; runs go to
# OUT/runs/<side>-r<round>, one line per run to OUT/runs.log).
set -u
here=${OUT:-$(cd "$(dirname "$0")" && pwd)}
a_tree=${A_TREE:-/work/wt/ab-old}; b_tree=${B_TREE:-/work/main}
for round in 1 2; do
  for side in a b; do
    if [ $side = a ]; then tree=$a_tree; else tree=$b_tree; fi
    until awk '{exit !($1 < 1.0)}' /proc/loadavg; do sleep 5; done
    started="$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && export PYTHONPATH=$tree RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 \
       && python3 -m mafka4.cli experiment scaling --modes mafka4 --consumers 1,32 --settle-load 1.5 \
            --seed 31 --out "$here/runs/$side-r$round" \
       && python3 -m mafka4.cli analyze "$here/runs/$side-r$round") > "$here/runs/$side-r$round.log" 2>&1
    rc=$?
    echo "round $round $side $(git -C "$tree" rev-parse --short HEAD) start $started end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$rc" | tee -a "$here/runs.log"
  done
done
