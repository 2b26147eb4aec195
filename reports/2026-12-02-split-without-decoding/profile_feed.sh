#!/bin/bash
# py-spy on the read nodes during `mafka4 bench feed-lag --virtual-partitions 256` of TREE (default
# /work/wt-new): each read node sampled for 25 s from 5 s into the producer's 20 s, as collapsed
# stacks (read_node-<id>.txt), then summarised by profile_summary.py. Usage: profile_feed.sh OUT_DIR
set -u
out=$(realpath -m "$1"); tree=${TREE:-/work/wt-new}
home=$(mktemp -d /work/scratch/s48/profile-XXXX)
mkdir -p "$out"
for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && break; sleep 5; done
cd /tmp && export MAFKA4_HOME=$home PYTHONPATH=$tree
env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli up > "$out/profile_up.log" 2>&1
env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli bench feed-lag --virtual-partitions 256 \
  --output "$out/profile_feed_lag.json" > "$out/profile_bench.log" 2>&1 &
bench=$!
# The bench creates its topic and waits for a quiet machine before producing: sampling starts once
# a read node is busy (over half a core for a second: the feed under way), then 5 s more.
busy() { python3 - "$@" <<'PY'
import os, sys, time
def ticks(pid): return sum(map(int, open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11:13]))
pids = sys.argv[1:]; before = {p: ticks(p) for p in pids}; time.sleep(1)
sys.exit(0 if any(ticks(p) - before[p] > os.sysconf("SC_CLK_TCK") / 2 for p in pids) else 1)
PY
}
for _ in $(seq 1 400); do busy $(pgrep -f "^ray::ReadNode") && break; done
sleep 5
for pid in $(pgrep -f "^ray::ReadNode"); do
  py-spy record --pid "$pid" --duration 25 --rate 100 --format raw --nonblocking \
    --output "$out/read_node-$pid.txt" > /dev/null 2>&1 &
done
wait
python3 -m mafka4.cli down
