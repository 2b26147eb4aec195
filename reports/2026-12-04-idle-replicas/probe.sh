#!/bin/bash
# Idle cost of a Mafka3 topic of 32 partitions RF 2 on 4 write nodes.
set -u
export MAFKA4_HOME=/tmp/m4-idle RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 PYTHONPATH=${TREE:-/work/main}
rm -rf $MAFKA4_HOME; cd /tmp
date -u +%T; cat /proc/loadavg
python3 -m mafka4.cli up --write-nodes 4 --read-nodes 1 || exit 1
python3 $(dirname $0)/cpu_top.py 30 > $(dirname $0)/empty.txt
python3 -m mafka4.cli topic create idle32 --partitions 32 --replication-factor 2 --min-insync-replicas 2 --read-mode mafka3
sleep 60
python3 $(dirname $0)/cpu_top.py 60 > $(dirname $0)/topic32.txt
date -u +%T; cat /proc/loadavg
