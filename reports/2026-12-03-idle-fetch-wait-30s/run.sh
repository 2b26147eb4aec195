#!/bin/bash
# idle member A/B: old = 11a070e (fetch_idle_wait_ms_max 10 s), new = idle-fetch (30 s); one cluster of the new tree
set -u
OLD=/work/wt/snap-old; NEW=/work/wt/idle-fetch  # checkouts of 11a070e and 386cbb3
export MAFKA4_HOME=/work/scratch/s51/idle/home RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
cd /work/scratch/s51/idle
(cd /tmp && PYTHONPATH=$NEW python3 -m mafka4.cli up && PYTHONPATH=$NEW python3 -m mafka4.cli topic create tl --partitions 2 \
   && PYTHONPATH=$NEW python3 -m mafka4.cli topic create idle-members --partitions 4 --read-mode mafka3) || exit 1
sleep 30
M=/work/main/reports/2026-12-02-fetch-sessions/measure_idle_member.sh
OLD_TREE=$OLD NEW_TREE=$NEW bash $M 2 tl idle4 idle_member_runs.jsonl
OLD_TREE=$OLD NEW_TREE=$NEW bash $M 2 idle-members idle3 idle_member_runs.jsonl
(cd /tmp && PYTHONPATH=$NEW python3 -m mafka4.cli down)
