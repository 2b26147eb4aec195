#!/bin/bash
# A/B: `mafka4 topic list` of the old client (a Ray driver that opens etcd, 2bc7935) and the new (client port),
# alternating, against one running local cluster. Bytecode caches allowed, as an installed package has them.
# Usage: measure.sh ROUNDS OUT.jsonl
set -u
rounds=$1; out=$2
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    if [ $side = old ]; then tree=/work/wt-old; join=$(cat OLD_ENV_FILE); else tree=/work/main; join=""; fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    m=$(cd /tmp && env -u PYTHONDONTWRITEBYTECODE $join PYTHONPATH=$tree /usr/bin/time -f "%e %U %S %M" python3 -m mafka4.cli topic list 2>&1 >/dev/null | tail -1)
    set -- $m
    echo "{\"round\": $i, \"side\": \"$side\", \"wall_s\": $1, \"user_s\": $2, \"sys_s\": $3, \"max_rss_kb\": $4, \"load_1m\": $load}" >> "$out"
  done
done
