#!/bin/bash
# A/B of a bench of the old client (52a8afa: Ray drivers that open etcd, batches over the actors' streams) and
# the new (clients of the ports), A B A B, against one running local cluster (MAFKA4_HOME), each once the
# 1-minute load average is below 1.5. The cluster runs the new code for both: what differs is the client.
# Usage: ab_bench.sh ROUNDS OUT_DIR BENCH [BENCH ARGS...]   (writes OUT_DIR/<bench>_<side>_<round>.json)
set -u
rounds=$1; out=$(realpath -m "$2"); bench=$3; shift 3
quiet() { for _ in $(seq 1 36); do awk '{exit !($1 < 1.5)}' /proc/loadavg && return; sleep 5; done; }
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    if [ $side = old ]; then tree=/work/wt-old; else tree=/work/main; fi
    quiet
    echo "$(date -u +%H:%M:%S) $bench $side round $i, load $(cut -d' ' -f1 /proc/loadavg)"
    (cd /tmp && env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=$tree python3 -m mafka4.cli bench "$bench" "$@" \
       --output "$out/${bench}_${side}_$i.json" > "$out/${bench}_${side}_$i.log" 2>&1) || echo "  exit $?"
  done
done
