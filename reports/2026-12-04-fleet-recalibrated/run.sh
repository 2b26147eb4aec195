#!/bin/bash
# The fleet model recalibrated at fcc0a13 (2026-12-04): calibrate on a quiet machine, then the
# model and its sensitivity with that calibration. The model and the sensitivity are
# deterministic for a calibration and a seed: rerunning them reproduces fleet_summary.json and
# sensitivity.json exactly (their Parquet event logs are not kept here for that reason).
set -u
out=$(realpath -m "$(dirname "$0")")
cd /tmp
mafka4 fleet calibrate --out "$out/calibration.json"                         # 348.4 s, 10:21-10:27 UTC
mafka4 fleet model --calibration "$out/calibration.json" --out /tmp/fleet-model  # 24 s (model.log)
cp /tmp/fleet-model/fleet_summary.json "$out/"
mafka4 fleet sensitivity --calibration "$out/calibration.json" --out "$out"      # 136 s (sensitivity.log)
