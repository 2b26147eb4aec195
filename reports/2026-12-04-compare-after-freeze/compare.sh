#!/bin/bash
cd /work/wt/cmp58
export PYTHONPATH=/work/wt/cmp58 RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
echo "start $(date -u +%T) commit $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 -m mafka4.cli compare --out /work/scratch/s58/compare
echo "rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
