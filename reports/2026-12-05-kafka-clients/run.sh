#!/bin/bash
# mafka4 bench kafka-clients on a fresh local cluster of its own home; stops it by `mafka4 down` (PIDs) after.
set -u
export MAFKA4_HOME=/tmp/m4bench
rm -rf $MAFKA4_HOME
cd /work/main
echo "commit $(git rev-parse --short HEAD)"; date -u +%T; uptime
timeout 300 mafka4 up --write-nodes 2 --read-nodes 1 | tail -1
sleep 20; uptime
timeout 1800 mafka4 bench kafka-clients --repetitions 3 --messages 50000 --output /work/scratch/s61/bench/bench_kafka_clients.json
echo "bench rc=$?"; uptime; date -u +%T
timeout 120 mafka4 down | tail -1
