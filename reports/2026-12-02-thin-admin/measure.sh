#!/bin/bash
# A/B: `mafka4 topic describe`, `group list` and `group describe` of the old tree (OLD_TREE, e0b6706:
# Ray drivers that read etcd and ask the actors over Ray) and the new (clients of a node's port),
# alternating old and new per round, against one running local cluster (MAFKA4_HOME). Each run:
# wall seconds, user+system CPU seconds and max RSS (/usr/bin/time), the 1-minute load before it.
# Each round starts once the 1-minute load is below 1.0.
# The old side, a Ray driver, is given the cluster's Ray token through Ray's own variables.
# Usage: measure.sh ROUNDS TOPIC GROUP OUT.jsonl
set -u
rounds=$1; topic=$2; group=$3; out=$4
old_tree=${OLD_TREE:-/work/wt-old}
quiet() {  # wait (at most 180 s) for the 1-minute load average to fall below 1.0
  for _ in $(seq 1 36); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done
}
for i in $(seq 1 "$rounds"); do
  quiet
  for command in "topic describe $topic" "group list" "group describe $group"; do
    for side in old new; do
      if [ $side = old ]; then tree=$old_tree; else tree=/work/main; fi
      load=$(cut -d' ' -f1 /proc/loadavg)
      stats=$(cd /tmp && env -u PYTHONDONTWRITEBYTECODE RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$MAFKA4_HOME/ray_token" \
        PYTHONPATH=$tree /usr/bin/time -f "%e %U %S %M" python3 -m mafka4.cli $command 2>&1 >/dev/null | tail -1)
      read -r wall user sys rss_kb <<< "$stats"
      echo "{\"round\": $i, \"command\": \"$(echo $command | cut -d" " -f1-2)\", \"side\": \"$side\", \"wall_s\": $wall, \"cpu_s\": $(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}'), \"max_rss_kb\": $rss_kb, \"load_1m\": $load}" >> "$out"
      sleep 2
    done
  done
done
