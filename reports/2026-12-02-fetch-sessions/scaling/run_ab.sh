#!/bin/bash
# A/B of the scaling experiment's client layout, Mafka4 mode, both sides pinning write nodes to the
# write set (CPU 0) and read nodes to the read set (CPU 1):
#   A (A_TREE, 4e4fe71): the consumers are threads of the driver, beside the producer, unpinned;
#   B (B_TREE, a8cded3): each consumer is a process of its own, pinned to the read set; the producer
#     (the driver) is pinned to the write set while it measures.
# Per round: A N=1, B N=1, A N=32, B N=32, each its own `mafka4 experiment scaling --modes mafka4` run
# from a 1-minute load below 1.0, measuring once the settled group's load is below 1.5 (--settle-load).
# Usage: run_ab.sh ROUNDS OUT_DIR
set -u
rounds=$1; out=$(realpath -m "$2")
a_tree=${A_TREE:-/work/wt-old}; b_tree=${B_TREE:-/work/wt-b}
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
for r in $(seq 1 "$rounds"); do
  for n in 1 32; do
    for side in threads pinned; do
      if [ $side = threads ]; then tree=$a_tree; else tree=$b_tree; fi
      quiet
      dir="$out/r$r-$side-c$n"
      mkdir -p "$dir"
      load=$(cut -d' ' -f1 /proc/loadavg)
      (cd /tmp && env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=$tree python3 -m mafka4.cli experiment scaling \
         --modes mafka4 --consumers "$n" --seed $((40 + r)) --settle-load 1.5 --out "$dir" > "$dir/progress.log" 2>&1)
      echo "round $r $side N=$n rc=$? load at start $load"
    done
  done
done
