#!/bin/bash
# Issue 36: experiment scaling, both modes, 1 and 32 consumers, 3 repetitions, settle before each.
# Cluster logs (not data) copied every 15 s so they outlive the temporary home.
set -u
out=$(realpath -m "$(dirname "$0")/work")
mkdir -p $out/homes
cd /tmp
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
( while true; do
    for h in /tmp/m4x-*; do [ -d "$h" ] || continue
      rsync -a --exclude 'data/' --exclude 'etcd/' --exclude '*.so' --exclude 'runtime_resources/' "$h/" "$out/homes/$(basename $h)/" 2>/dev/null
    done; sleep 15; done ) &
copier=$!
until awk '{exit !($1 < 1.0)}' /proc/loadavg; do sleep 5; done
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git -C /work/main rev-parse --short HEAD)"
(cd /work/main && git log -1 --format=%H) > $out/commit.txt
mafka4 experiment scaling --consumers 1,32 --repetitions 3 --settle-load 1.5 --seed 31 \
  --experiment-id i36-r3 --out $out/results
rc=$?
echo "experiment rc=$rc end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
kill $copier
