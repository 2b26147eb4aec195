#!/bin/bash
# A/B of the scaling experiment's consumers as threads of the driver (A: the tree A_TREE, 9827fe3)
# against each consumer in a process of its own (B: /work/main), both on the same mafka4 code:
# per round A N=1, B N=1, A N=32, B N=32, each its own `mafka4 experiment scaling --modes mafka4`
# run from a 1-minute load below 1.0 (a run's own cluster raises the load its next one starts at),
# measuring once the settled group's load is below SETTLE_LOAD (default 1.5; --settle-load).
# Usage: run_ab.sh ROUNDS OUT_DIR
set -u
rounds=$1; out=$2
a_tree=${A_TREE:-/work/wt-a}
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
for r in $(seq 1 "$rounds"); do
  for n in 1 32; do
    for side in threads processes; do
      if [ $side = threads ]; then tree=$a_tree; else tree=/work/main; fi
      quiet
      dir="$out/r$r-$side-c$n"
      mkdir -p "$dir"
      (cd /tmp && env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=$tree python3 -m mafka4.cli experiment scaling \
         --modes mafka4 --consumers "$n" --seed $((20 + r)) --settle-load "${SETTLE_LOAD:-1.5}" --out "$dir" > "$dir/progress.log" 2>&1)
      echo "round $r $side N=$n rc=$? $(grep -o 'load [0-9.]* before' "$dir/progress.log" | head -1)"
    done
  done
done
quiet
