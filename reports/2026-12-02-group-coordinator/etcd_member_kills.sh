#!/bin/bash
# A 3-member etcd loses one member (kill -9), then a new client runs topic list, produce and
# consume --group in both read modes: for each member in turn, on a fresh `mafka4 up --etcd-members 3`.
# Usage: MAFKA4_HOME=... etcd_member_kills.sh
set -u
cd /tmp
for k in 0 1 2; do
  mafka4 down >/dev/null 2>&1; rm -rf "$MAFKA4_HOME"
  mafka4 up --etcd-members 3 >/dev/null 2>&1
  pid=$(mafka4 status 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['etcd_members'][$k]['pid'])")
  mafka4 topic create e3 --partitions 2 --read-mode mafka4 >/dev/null 2>&1
  mafka4 topic create e3m --partitions 2 --read-mode mafka3 >/dev/null 2>&1
  kill -9 "$pid"; sleep 1
  echo "== killed etcd-$k (pid $pid)"
  mafka4 topic list | tr '\n' ' '
  seq 1 20 | mafka4 produce e3 2>&1 | tail -1
  seq 1 20 | mafka4 produce e3m 2>&1 | tail -1
  timeout 120 mafka4 consume e3 --group g --from-beginning --timeout-ms 3000 2>&1 >/dev/null | tail -1
  timeout 120 mafka4 consume e3m --group g --from-beginning --timeout-ms 3000 2>&1 >/dev/null | tail -1
done
mafka4 down
