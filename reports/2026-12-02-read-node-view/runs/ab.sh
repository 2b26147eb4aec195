#!/bin/bash
# A B A B: mafka4 bench vp-density on old (2bc7935, no client port) and new (the client port: every
# read node keeps a watched view of etcd), each on a fresh `mafka4 up` cluster, from a quiet machine.
set -u
out=OUT
log() { echo "$(date +%T) $* load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/log.txt; }
wait_quiet() { for i in $(seq 1 60); do l=$(cut -d' ' -f1 /proc/loadavg); if python3 -c "import sys; sys.exit(0 if $l < 1.0 else 1)"; then return; fi; sleep 5; done; }
round=0
for side in old new old new; do
  round=$((round+1))
  if [ $side = old ]; then pp=/work/wt-old; else pp=/work/main; fi
  export MAFKA4_HOME=OUT/home-$side
  rm -rf $MAFKA4_HOME
  wait_quiet; log "round $round $side: up"
  (cd /tmp && env PYTHONPATH=$pp python3 -m mafka4.cli up > $out/up_$round.txt 2>&1)
  sleep 20; wait_quiet; log "round $round $side: vp-density"
  (cd /tmp && env PYTHONPATH=$pp python3 -m mafka4.cli bench vp-density --output $out/vp_density_${round}_${side}.json > $out/vp_density_${round}_${side}.txt 2>&1); log "  exit $?"
  (cd /tmp && env PYTHONPATH=$pp python3 -m mafka4.cli down > /dev/null 2>&1)
done
log done
