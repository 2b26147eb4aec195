#!/bin/bash
# `mafka4 topic list` against one running local cluster (MAFKA4_HOME), three ways of starting it,
# alternating per round: the pyenv shim (`mafka4` on this machine's PATH: a bash script that
# finds the interpreter, then runs it), the interpreter's own console script (an editable install
# of the working tree), and a plain venv holding only the client's dependencies (`pip install
# <tree>`: what a user installs). The first two import the tree measured (NEW_TREE) by PYTHONPATH. Each run: wall seconds, user+system CPU seconds and max RSS
# (/usr/bin/time), the 1-minute load before it. Each round starts once the load is below 1.0.
# Usage: measure_topic_list.sh ROUNDS OUT.jsonl  (CLIENT_VENV: the plain venv)
set -u
rounds=$1; out=$2
venv=${CLIENT_VENV:-/work/scratch/s47/cvenv}
tree=${NEW_TREE:-/work/wt-new}
quiet() {
  for _ in $(seq 1 36); do awk '{exit !($1 < 1.0)}' /proc/loadavg && return; sleep 5; done
}
for i in $(seq 1 "$rounds"); do
  quiet
  for way in shim console venv; do
    case $way in
      shim) command=(env PYTHONPATH=$tree mafka4 topic list) ;;
      console) command=(env PYTHONPATH=$tree /root/.pyenv/versions/3.11.7/bin/mafka4 topic list) ;;
      venv) command=("$venv/bin/mafka4" topic list) ;;
    esac
    load=$(cut -d' ' -f1 /proc/loadavg)
    printed=$(cd /tmp && env -u PYTHONDONTWRITEBYTECODE /usr/bin/time -f "%e %U %S %M" "${command[@]}" 2>&1 >/dev/null)
    case $printed in *"exited with non-zero"*) echo "$way failed: $printed" >&2; exit 1 ;; esac
    stats=$(echo "$printed" | tail -1)
    read -r wall user sys rss_kb <<< "$stats"
    echo "{\"round\": $i, \"way\": \"$way\", \"wall_s\": $wall, \"cpu_s\": $(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}'), \"max_rss_kb\": $rss_kb, \"load_1m\": $load}" >> "$out"
    sleep 2
  done
done
