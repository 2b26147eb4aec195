#!/bin/bash
# A = 11a070e (main), B = 6e5ab06 (feed-256), snapshots by git archive.
set -e
OUT=/work/wt/feed-256/reports/2026-12-03-feed-256
cd /tmp/h3/C
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/h3/C
for spec in "rounds_512:" "rounds_4096:--round-batches 64 --rounds 30 --warmup-rounds 3"; do
  name=${spec%%:*}; extra=${spec#*:}
  echo "== $name $(date -u +%H:%M:%S) $(uptime)"
  python3 benchmarks/feed_split_micro.py --ab /tmp/h3/A /tmp/h3/C --repeats 3 $extra --output $OUT/ab2_$name.json
done
echo "== done $(date -u +%H:%M:%S) $(uptime)"
