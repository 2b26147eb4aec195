#!/bin/bash
# 100,352 one-replica VPs on one read node again (98 topics of 1,024, one physical partition each),
# now that an idle topic's feed stream asks every 5 s. Samples the machine's busiest processes
# every 30 s (processes.log) to name what keeps the load up.
set -u
out=$(realpath -m "$(dirname "$0")")
home=$(mktemp -d /tmp/mafka4-vp100k-XXXX)
cd /tmp
export MAFKA4_HOME=$home RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
until awk '{exit !($1 < 1.0)}' /proc/loadavg; do sleep 5; done
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git -C /work/main rev-parse --short HEAD) home $home"
mafka4 up --write-nodes 1 --read-nodes 1
( while sleep 30; do
    echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    ps -eo pid,pcpu,rss,nlwp,stat,args --sort=-pcpu | head -12 | cut -c1-160
  done ) > "$out/processes.log" 2>&1 &
sampler=$!
/usr/bin/time -v mafka4 bench vp-density --topics 98 --virtual-partitions 1024 --partitions 1 --read-replicas 1 \
  --window-s 60 --settle-s 60 --output "$out/bench_vp_density_100352_rr1.json"
rc=$?
echo "bench rc=$rc end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg); free -m:"; free -m
kill $sampler
mafka4 down
rm -rf "$home"
