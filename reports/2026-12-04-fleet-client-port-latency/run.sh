#!/bin/bash
# The fleet model recalibrated with its ack -> reader trials over the nodes' client ports (both
# sides), then the model with that calibration. Waits for a quiet machine first.
set -u
out=$(realpath -m "$(dirname "$0")")
cd /tmp
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
until awk '{exit !($1 < 1.0)}' /proc/loadavg; do sleep 5; done
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git -C /work/main rev-parse --short HEAD)"
/usr/bin/time -f "calibrate %e s" mafka4 fleet calibrate --out "$out/calibration.json" > "$out/calibrate.log" 2>&1
echo "calibrated $(date -u +%T) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf /tmp/fleet-model-cp
mafka4 fleet model --calibration "$out/calibration.json" --out /tmp/fleet-model-cp > "$out/model.log" 2>&1
echo "model rc=$? $(date -u +%T)"
cp /tmp/fleet-model-cp/fleet_summary.json "$out/"
