#!/bin/bash
# An A/B of one mafka4 command between two checkouts, alternating A B A B, each run on a fresh
# `mafka4 up` of its own tree (its own MAFKA4_HOME, stopped by `mafka4 down` after), started from a
# quiet machine. What the measurement rules of this project ask of every A/B, in one place, so a
# report records its command line instead of a copy of this loop.
#
# Usage: benchmarks/run_ab.sh A_TREE B_TREE ROUNDS OUT_DIR NAME -- COMMAND...
#   COMMAND: the `mafka4` arguments to measure; the string {output} in them becomes the run's JSON
#   path, OUT_DIR/NAME-r<round>-<a|b>.json (its log: the same name, .log; the cluster's logs stay in
#   its MAFKA4_HOME, named in the run's line).
#   Environment: UP_ARGS (extra `mafka4 up` arguments), QUIET_LOAD (default 1.0: the 1-minute load
#   a run waits to fall below, at most QUIET_WAIT_S, default 300; a run that started above it says
#   so in its line), FIRST_ROUND (default 1).
# Prints one line per run (side, tree's commit, start/end time, loads, exit code), also appended to
# OUT_DIR/runs.log.
set -u
if [ $# -lt 7 ] || [ "$6" != "--" ]; then
  sed -n '2,15p' "$0" >&2
  exit 2
fi
a_tree=$(realpath "$1"); b_tree=$(realpath "$2"); rounds=$3; out=$(realpath -m "$4"); name=$5
shift 6
quiet_load=${QUIET_LOAD:-1.0}; quiet_wait_s=${QUIET_WAIT_S:-300}
mkdir -p "$out"

wait_for_quiet() {  # 0 if the load fell below QUIET_LOAD in time, else 1
  local waited=0
  until awk -v q="$quiet_load" '{exit !($1 < q)}' /proc/loadavg; do
    (( waited >= quiet_wait_s )) && return 1
    sleep 5; waited=$((waited + 5))
  done
}

first=${FIRST_ROUND:-1}
for round in $(seq "$first" $((first + rounds - 1))); do
  for side in a b; do
    if [ $side = a ]; then tree=$a_tree; else tree=$b_tree; fi
    run="$out/$name-r$round-$side"
    command=("${@//\{output\}/$run.json}")
    home=$(mktemp -d /tmp/mafka4-ab-XXXX)
    if wait_for_quiet; then quiet=quiet; else quiet="NOT QUIET (waited ${quiet_wait_s} s)"; fi
    started="$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd /tmp && export MAFKA4_HOME=$home PYTHONPATH=$tree RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 \
       && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli up ${UP_ARGS:-} \
       && env -u PYTHONDONTWRITEBYTECODE python3 -m mafka4.cli "${command[@]}"; \
       rc=$?; python3 -m mafka4.cli down; exit $rc) > "$run.log" 2>&1
    rc=$?
    line="round $round $side $(git -C "$tree" rev-parse --short HEAD) start $started ($quiet) end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$rc"
    echo "$line home $home" | tee -a "$out/runs.log"  # the cluster's own logs stay there
  done
done
