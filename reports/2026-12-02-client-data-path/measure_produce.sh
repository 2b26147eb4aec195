#!/bin/bash
# A/B: a one-message `mafka4 produce` of the old client (a Ray driver that opens etcd, 52a8afa), the new one
# (a client of the leaders' client ports) from this checkout's editable install, and the new one installed
# as a user installs a client (`pip install .` into a venv: only msgpack, lz4, zstandard and isal), in turn,
# against one running local cluster (MAFKA4_HOME). Bytecode caches allowed, as an installed package has
# them (each side ran once before).
# Usage: measure_produce.sh ROUNDS TOPIC OUT.jsonl
set -u
rounds=$1; topic=$2; out=$3
for i in $(seq 1 "$rounds"); do
  for side in old new installed; do
    python=python3; tree=/work/main
    [ $side = old ] && tree=/work/wt-old
    [ $side = installed ] && python=/tmp/client-venv/bin/python && tree=""
    load=$(cut -d' ' -f1 /proc/loadavg)
    m=$(cd /tmp && echo "message $i" | env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=$tree /usr/bin/time -f "%e %U %S %M" $python -m mafka4.cli produce "$topic" 2>&1 >/dev/null | tail -1)
    set -- $m
    echo "{\"round\": $i, \"side\": \"$side\", \"wall_s\": $1, \"user_s\": $2, \"sys_s\": $3, \"max_rss_kb\": $4, \"load_1m\": $load}" >> "$out"
  done
done
