#!/usr/bin/env bash
# More produce rounds, alternating old and new, a fresh cluster each (the first A/B's produce runs were too few to read).
set -u
out=/work/scratch/s38/ab
wait_quiet() { while :; do l=$(cut -d' ' -f1 /proc/loadavg); awk -v l=$l 'BEGIN{exit !(l<1.0)}' && break; sleep 10; done; }
for round in 3 4 5; do
  for v in old new; do
    d=/work/wt/old; [ $v = new ] && d=/work/main
    home=/tmp/m4ab-$v-$round; rm -rf $home
    cd $d
    export PYTHONPATH=$d MAFKA4_HOME=$home
    wait_quiet
    python3 -m mafka4.cli up --write-nodes 3 --read-nodes 2 > $out/up_${v}_$round.txt 2>&1 || { echo "up failed"; exit 1; }
    wait_quiet
    echo "$(date +%T) $v round $round produce, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C $d rev-parse --short HEAD)" | tee -a $out/ab_log.txt
    python3 -m mafka4.cli bench produce --skip-memory --output $out/produce_${v}_$round.json > $out/produce_${v}_$round.txt 2>&1
    python3 -m mafka4.cli down > $out/down_${v}_$round.txt 2>&1
  done
done
echo "$(date +%T) produce rounds done" | tee -a $out/ab_log.txt
