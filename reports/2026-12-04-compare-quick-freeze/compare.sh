#!/bin/bash
cd <a detached worktree of 2206254>
export PYTHONPATH=<a detached worktree of 2206254> RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
until awk '{exit !($1 < 1.0)}' /proc/loadavg; do sleep 5; done
echo "start $(date -u +%T) commit $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 -m mafka4.cli compare --quick --out /work/scratch/s57/compare-quick/out
echo "rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
