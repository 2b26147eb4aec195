#!/bin/bash
# A/B: an idle `mafka4 consume TOPIC --group GROUP` of the old client (4e4fe71: every fetch waits
# fetch_wait_ms_max, 500 ms) and the new (43ee404: an idle destination is asked with doubling waits, up to
# fetch_idle_wait_ms_max, 10 s), alternating, against one running local cluster (MAFKA4_HOME): RSS and threads
# after SETTLE_S, and the CPU its threads used over the next WINDOW_S (/proc/<pid>/schedstat of every
# thread, summed). Nothing is produced meanwhile. Each side starts once the 1-minute load is below 1.5.
# Usage: measure_idle_member.sh ROUNDS TOPIC GROUP OUT.jsonl  (OLD_TREE, NEW_TREE: the checkouts)
# Both sides are thin clients of the ports (the Ray token variables below, kept from the script this one
# was copied from, reach no Ray).
set -u
rounds=$1; topic=$2; group=$3; out=$4
old_tree=${OLD_TREE:-/work/wt-old}
SETTLE_S=15; WINDOW_S=60
cpu_ns() {  # the CPU time of every thread of $1, in ns
  local total=0
  for f in /proc/$1/task/*/schedstat; do read -r ns _ < "$f" && total=$((total + ns)); done
  echo $total
}
quiet() {  # wait (at most 180 s) for the 1-minute load average to fall below 1.5: a start loads the machine
  for _ in $(seq 1 36); do awk '{exit !($1 < 1.5)}' /proc/loadavg && return; sleep 5; done
}
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    if [ $side = old ]; then tree=$old_tree; else tree=${NEW_TREE:-/work/wt-new}; fi
    quiet
    (cd /tmp && exec env -u PYTHONDONTWRITEBYTECODE RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$MAFKA4_HOME/ray_token" \
       PYTHONPATH=$tree python3 -m mafka4.cli consume "$topic" \
       --group "$group-$side" --timeout-ms 600000 >/dev/null 2>&1) &
    pid=$!
    sleep $SETTLE_S
    load=$(cut -d' ' -f1 /proc/loadavg)
    rss_kb=$(awk '/VmRSS/ {print $2}' /proc/$pid/status); threads=$(awk '/Threads/ {print $2}' /proc/$pid/status)
    before=$(cpu_ns $pid); sleep $WINDOW_S; after=$(cpu_ns $pid)
    kill $pid; wait $pid 2>/dev/null
    echo "{\"round\": $i, \"side\": \"$side\", \"topic\": \"$topic\", \"rss_kb\": $rss_kb, \"threads\": $threads, \"cpu_ms_in_window\": $(( (after - before) / 1000000 )), \"window_s\": $WINDOW_S, \"load_1m\": $load}" >> "$out"
  done
done
