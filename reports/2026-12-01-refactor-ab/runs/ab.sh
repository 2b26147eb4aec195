#!/usr/bin/env bash
# A/B of the refactor: old = 98ab186 (/work/wt/old), new = main (/work/main); alternate old new old new.
# Each round: a fresh `mafka4 up` in its own home, bench produce --skip-memory, bench consume (1 and 4
# consumers, 1M backlog, 2 repetitions; the new code with --ack-cadences none = no commit in the window,
# as the old code's 5 s auto-commit never fired within a drain), mafka4 down; then bench stream (no cluster).
set -u
out=/work/scratch/s38/ab
wait_quiet() { while :; do l=$(cut -d' ' -f1 /proc/loadavg); awk -v l=$l 'BEGIN{exit !(l<1.0)}' && break; sleep 10; done; }
for round in 1 2; do
  for v in old new; do
    d=/work/wt/old; extra=""; [ $v = new ] && { d=/work/main; extra="--ack-cadences none"; }
    home=/tmp/m4ab-$v-$round; rm -rf $home
    cd $d
    export PYTHONPATH=$d MAFKA4_HOME=$home
    wait_quiet
    echo "$(date +%T) $v round $round: load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C $d rev-parse --short HEAD)" | tee -a $out/ab_log.txt
    python3 -m mafka4.cli up --write-nodes 3 --read-nodes 2 > $out/up_${v}_$round.txt 2>&1 || { echo "up failed"; cat $out/up_${v}_$round.txt; exit 1; }
    wait_quiet
    echo "$(date +%T)   produce, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/ab_log.txt
    python3 -m mafka4.cli bench produce --skip-memory --output $out/produce_${v}_$round.json > $out/produce_${v}_$round.txt 2>&1
    wait_quiet
    echo "$(date +%T)   consume, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/ab_log.txt
    python3 -m mafka4.cli bench consume --messages 1000000 --consumers 1,4 --repetitions 2 $extra --output $out/consume_${v}_$round.json > $out/consume_${v}_$round.txt 2>&1
    python3 -m mafka4.cli down > $out/down_${v}_$round.txt 2>&1
    wait_quiet
    echo "$(date +%T)   stream, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/ab_log.txt
    python3 -m mafka4.cli bench stream --output $out/stream_${v}_$round.json > $out/stream_${v}_$round.txt 2>&1
  done
done
echo "$(date +%T) done" | tee -a $out/ab_log.txt
