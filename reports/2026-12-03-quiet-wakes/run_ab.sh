#!/bin/bash
# A/B of `mafka4 bench vp-join --trials 5`: A = OLD_TREE (b3e3e2a: every event under the group's and the
# topic's prefixes wakes every member of a mafka4-mode group into a sync), B = NEW_TREE (11df1de: only
# the events that may change an ownership plan wake it). Each run on a fresh `mafka4 up` (3 write, 2 read
# nodes) of its own tree, from a 1-minute load below 1.0, stopped after: vp_join-r<round>-<side>.json.
# Usage: run_ab.sh ROUNDS OUT_DIR  (FIRST_ROUND: the first round's number, default 1)
set -u
rounds=$1; out=$(realpath -m "$2")
old_tree=${OLD_TREE:-/work/wt-old2}; new_tree=${NEW_TREE:-/work/wt-quiet}
quiet() { for _ in $(seq 1 60); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done; }
mkdir -p "$out"
for r in $(seq "${FIRST_ROUND:-1}" $(( ${FIRST_ROUND:-1} + rounds - 1 ))); do
  for side in old new; do
    if [ $side = old ]; then tree=$old_tree; else tree=$new_tree; fi
    home=$(mktemp -d /tmp/m4join-XXXX)
    quiet
    echo "round $r $side start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && export MAFKA4_HOME=$home PYTHONPATH=$tree && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli up \
       && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli bench vp-join --trials 5 --output "$out/vp_join-r$r-$side.json"; \
       rc=$?; python3 -m mafka4.cli down; exit $rc) > "$out/vp_join-r$r-$side.log" 2>&1
    echo "round $r $side rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
