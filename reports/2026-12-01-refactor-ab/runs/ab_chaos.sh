#!/usr/bin/env bash
# Chaos verdicts before and after the refactor: the same seeds on old (98ab186) and new (main), alternating.
set -u
out=/work/scratch/s38/ab
wait_quiet() { while :; do l=$(cut -d' ' -f1 /proc/loadavg); awk -v l=$l 'BEGIN{exit !(l<1.5)}' && break; sleep 10; done; }
for seed in 42 7 1234; do
  for v in old new; do
    d=/work/wt/old; [ $v = new ] && d=/work/main
    cd $d; export PYTHONPATH=$d
    wait_quiet
    echo "$(date +%T) chaos seed $seed $v, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/ab_log.txt
    python3 -m mafka4.cli chaos --seed $seed --duration-s 60 --out $out/chaos_${v}_$seed.json > $out/chaos_${v}_$seed.txt 2>&1
    echo "$(date +%T)   exit $?: $(tail -1 $out/chaos_${v}_$seed.txt)" | tee -a $out/ab_log.txt
  done
done
