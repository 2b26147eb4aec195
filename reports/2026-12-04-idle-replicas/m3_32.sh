#!/bin/bash
set -u
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 PYTHONPATH=${TREE:-/work/main}
out=$(dirname $0)/m3_32; rm -rf $out; mkdir -p $out; cd /tmp
( while true; do python3 $(dirname $0)/cpu_top.py 30 >> $out/cpu_top.log; echo "---- $(date -u +%T)" >> $out/cpu_top.log; done ) &
sampler=$!
date -u +%T; cat /proc/loadavg
python3 -m mafka4.cli experiment scaling --modes mafka3 --consumers 32 --repetitions 1 --settle-load 1.5 --duration-s 10 --seed 5 --out $out/runs
echo rc=$?
kill $sampler
date -u +%T; cat /proc/loadavg
