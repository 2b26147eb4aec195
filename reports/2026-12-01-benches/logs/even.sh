#!/usr/bin/env bash
# The even comparison (issue 35 part 6) and today's bench figures, on main, alternating Redis (A)
# and mafka4 (B) twice: A B A B. Each drain sweep covers the same backlog (1M x 1 KiB), consumer
# counts 1 and 4, and ack cadences none, per-read and every-5000ms; Redis also sweeps its pipeline
# depth and read COUNT between 1000 and matched. The last B round adds vp-join, vp-density, feed-lag.
set -u
out=${OUT:?}
mkdir -p $out
cd /work/main
export MAFKA4_HOME=/tmp/m4even
log() { echo "$(date +%T) $*, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/log.txt; }
wait_quiet() { while :; do l=$(cut -d' ' -f1 /proc/loadavg); awk -v l=$l 'BEGIN{exit !(l<1.0)}' && break; sleep 10; done; }
CADENCES=none,per-read,every-5000ms
for round in 1 2; do
  wait_quiet; log "round $round: redis-streams"
  mafka4 bench redis-streams --messages 1000000 --consumers 1,4 --repetitions 1 --ack-cadences $CADENCES \
      --output $out/redis_streams_$round.json > $out/redis_streams_$round.txt 2>&1; log "  exit $?"
  wait_quiet; rm -rf $MAFKA4_HOME; mafka4 up --write-nodes 3 --read-nodes 2 > $out/up_$round.txt 2>&1 || { log "up failed"; exit 1; }
  wait_quiet; log "round $round: consume"
  mafka4 bench consume --messages 1000000 --consumers 1,4 --repetitions 1 --ack-cadences $CADENCES \
      --output $out/consume_$round.json > $out/consume_$round.txt 2>&1; log "  exit $?"
  mafka4 down > /dev/null 2>&1
  wait_quiet; rm -rf $MAFKA4_HOME; mafka4 up --write-nodes 3 --read-nodes 2 > /dev/null 2>&1
  wait_quiet; log "round $round: produce"
  mafka4 bench produce --skip-memory --output $out/produce_$round.json > $out/produce_$round.txt 2>&1; log "  exit $?"
  if [ $round = 2 ]; then
    wait_quiet; log "vp-join"
    mafka4 bench vp-join --trials 3 --output $out/vp_join.json > $out/vp_join.txt 2>&1; log "  exit $?"
    mafka4 down > /dev/null 2>&1
    wait_quiet; rm -rf $MAFKA4_HOME; mafka4 up --write-nodes 3 --read-nodes 2 > /dev/null 2>&1
    wait_quiet; log "vp-density"
    mafka4 bench vp-density --output $out/vp_density.json > $out/vp_density.txt 2>&1; log "  exit $?"
    mafka4 down > /dev/null 2>&1
    wait_quiet; rm -rf $MAFKA4_HOME; mafka4 up --write-nodes 3 --read-nodes 2 > /dev/null 2>&1
    wait_quiet; log "feed-lag"
    mafka4 bench feed-lag --output $out/feed_lag.json > $out/feed_lag.txt 2>&1; log "  exit $?"
  fi
  mafka4 down > /dev/null 2>&1
  wait_quiet; log "round $round: stream"
  mafka4 bench stream --output $out/stream_$round.json > $out/stream_$round.txt 2>&1; log "  exit $?"
done
log "done"
