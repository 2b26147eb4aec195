#!/bin/bash
# Every measurement of this report, in order, on one `mafka4 up` of the new tree (NEW, d0ba384): an idle
# group member (old client OLD 4f5e950 against new, both modes), `topic list` in a plain venv of each
# tree, 1,000 idle members of each client, and the coordinator microbenchmark at both heartbeat waits.
# Usage: measure_all.sh (from this directory; the cluster's home is /work/scratch/s50/home2)
set -u
OLD=/work/wt-m; NEW=/work/wt-n
export MAFKA4_HOME=/work/scratch/s50/home2 RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
here=$(pwd)
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
quiet
(cd /tmp && PYTHONPATH=$NEW python3 -m mafka4.cli up && PYTHONPATH=$NEW python3 -m mafka4.cli topic create tl --partitions 2 \
   && PYTHONPATH=$NEW python3 -m mafka4.cli topic create idle-members --partitions 4 --read-mode mafka3) || exit 1
sleep 30
OLD_TREE=$OLD NEW_TREE=$NEW bash ../2026-12-02-fetch-sessions/measure_idle_member.sh 2 tl idle4 idle_member_runs_final.jsonl
OLD_TREE=$OLD NEW_TREE=$NEW bash ../2026-12-02-fetch-sessions/measure_idle_member.sh 2 idle-members idle3 idle_member_runs_final.jsonl
for round in 1 2 3 4 5; do
  quiet
  for side in old new; do
    if [ $side = old ]; then venv=/work/scratch/s50/cvenv; else venv=/work/scratch/s50/cvenv2; fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    stats=$(cd /tmp && env -u PYTHONDONTWRITEBYTECODE /usr/bin/time -f "%e %U %S %M" "$venv/bin/mafka4" topic list 2>&1 >/dev/null | tail -1)
    read -r wall user sys rss_kb <<< "$stats"
    echo "{\"round\": $round, \"side\": \"$side\", \"wall_s\": $wall, \"cpu_s\": $(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}'), \"max_rss_kb\": $rss_kb, \"load_1m\": $load}" >> topic_list_runs_final.jsonl
    sleep 2
  done
done
for side in old new; do
  if [ $side = old ]; then tree=$OLD; else tree=$NEW; fi
  PYTHONPATH=$tree python3 ../2026-12-02-group-coordinator/idle_members.py --members 1000 --processes 4 --per-group 10 \
    --topic idle-members --quiet-load 1.0 --out idle_members_runs_final.jsonl > "idle_members_$side.log" 2>&1
  echo "{\"side\": \"$side\", \"tree\": \"$tree\"}" >> idle_members_runs_final.jsonl
done
(cd /tmp && PYTHONPATH=$NEW python3 -m mafka4.cli down)
cd ../2026-12-02-fetch-sessions
for round in 1 2; do
  for wait_ms in 3333 30000; do
    quiet
    PYTHONPATH=$NEW python3 heartbeat_steady.py 1000 $wait_ms 60 >> "$here/heartbeat_steady_runs.log" 2>&1
  done
done
echo done
