#!/bin/bash
# A = d7f4842 (main), B = 1aaf9ed (feed-appends), snapshots by git archive; run under the heavy-work lock.
set -e
OUT=/tmp/fa/out
cd /tmp/fa/B
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/fa/B
for spec in "rounds_512:" "rounds_4096:--round-batches 64 --rounds 30 --warmup-rounds 3"; do
  name=${spec%%:*}; extra=${spec#*:}
  echo "== $name $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
  python3 benchmarks/feed_split_micro.py --ab /tmp/fa/A /tmp/fa/B --repeats 3 $extra --output $OUT/ab_$name.json
done
echo "== done $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
