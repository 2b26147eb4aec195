#!/bin/bash
# What importing the `mafka4 topic list` path costs, before and after the lazy imports of issue 36:
# `import mafka4.cli.main, mafka4.client.cluster_metadata` in the plain venv holding only the
# client's dependencies (CLIENT_VENV), the tree measured first on PYTHONPATH: BEFORE_TREE (the
# commit without them, untouched) and AFTER_TREE (the working tree). No cluster. The two sides
# alternate, and which goes first alternates by round. Each run: wall and user+system CPU seconds
# (/usr/bin/time) and the 1-minute load just before it. A round waits up to 15 s for a load below
# 1.0 and runs anyway after that (the load is recorded with every run).
# Usage: import_time.sh ROUNDS OUT.jsonl
set -u
rounds=$1; out=$2
venv=${CLIENT_VENV:-/work/scratch/s47/cvenv}
before=${BEFORE_TREE:-/work/wt-new}
after=${AFTER_TREE:-/work/main}
quiet() {
  for _ in $(seq 1 3); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done
}
for i in $(seq 1 "$rounds"); do
  quiet
  sides=(before after); [ $((i % 2)) -eq 0 ] && sides=(after before)
  for side in "${sides[@]}"; do
    tree=$before; [ "$side" = after ] && tree=$after
    load=$(cut -d' ' -f1 /proc/loadavg)
    stats=$(cd /tmp && /usr/bin/time -f "%e %U %S" env -u PYTHONDONTWRITEBYTECODE PYTHONPATH="$tree" "$venv/bin/python" \
              -c "import mafka4.cli.main, mafka4.client.cluster_metadata" 2>&1 | tail -1)
    read -r wall user sys <<< "$stats"
    echo "{\"side\": \"$side\", \"wall_s\": $wall, \"cpu_s\": $(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}'), \"load_1m\": $load}" >> "$out"
  done
done
