#!/bin/bash
# The 32-consumer comparison one configuration at a time, each from a quiet machine (1-minute load
# below 1.0): N=1, N=32, N=1, N=32, each its own `mafka4 experiment scaling --modes mafka4` run (a
# run's own work raises the load its next configuration would start at).
# Usage: run_quiet.sh OUT_DIR
set -u
out=$1
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
i=0
for n in 1 32 1 32; do
  i=$((i + 1))
  quiet
  dir="$out/quiet-$i-c$n"
  mkdir -p "$dir"
  (cd /tmp && env -u PYTHONDONTWRITEBYTECODE mafka4 experiment scaling --modes mafka4 --consumers "$n" \
     --seed $((7 + i)) --out "$dir" > "$dir/progress.log" 2>&1)
  echo "run $i N=$n rc=$? $(grep -o 'load [0-9.]* before' "$dir/progress.log" | head -1)"
done
