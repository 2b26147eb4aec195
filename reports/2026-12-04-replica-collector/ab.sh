#!/bin/bash
# A B A B of `mafka4 experiment scaling` at one consumer (both modes), with every Python process's
# collector passes of 5 ms or more logged (gcprobe sitecustomize), each run from a quiet machine.
set -u
out=/work/scratch/s57/ab-freeze
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
for round in 1 2; do
  for side in a b; do
    if [ $side = a ]; then tree=/work/wt/ab-a; else tree=/work/wt/freeze; fi
    run=$out/r$round-$side; mkdir -p $run/gc
    waited=0; until awk '{exit !($1 < 1.0)}' /proc/loadavg || [ $waited -ge 300 ]; do sleep 5; waited=$((waited+5)); done
    start="$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && GC_PROBE_DIR=$run/gc PYTHONPATH=$tree:<this report>/probe_site (gc_probe_sitecustomize.py as sitecustomize.py) env -u PYTHONDONTWRITEBYTECODE \
      python3 -m mafka4.cli experiment scaling --modes mafka4,mafka3 --consumers 1 --repetitions 1 --duration-s 50 \
      --settle-load 1.5 --out $run/events) > $run/run.log 2>&1
    echo "round $round $side $(git -C $tree rev-parse --short HEAD) start $start end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?" | tee -a $out/runs.log
  done
done
